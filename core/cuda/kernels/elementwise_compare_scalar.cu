// CUDA comparisons of a tensor with a scalar (x > 0, x == 2.5), giving bool; the scalar is a
// kernel argument rounded to the tensor's dtype as the CPU front's 0-dim tensor is.
#include <kiln/core/cuda/kernels/elementwise.h>
#include <kiln/core/cuda/kernels/elementwise_functors.cuh>
#include <kiln/core/cuda/kernels/loops.cuh>

namespace kiln::cuda {

namespace {

// Calls body(functor) for the comparison `op`.
template <class Body>
void with_functor(CompareOp op, Body&& body) {
  switch (op) {
    case CompareOp::eq: return body(fn::Eq{});
    case CompareOp::ne: return body(fn::Ne{});
    case CompareOp::lt: return body(fn::Lt{});
    case CompareOp::le: return body(fn::Le{});
    case CompareOp::gt: return body(fn::Gt{});
    case CompareOp::ge: return body(fn::Ge{});
  }
  KILN_UNREACHABLE("compare: unknown op ", static_cast<int>(op));
}

}  // namespace

void compare_scalar(CompareOp op, const Tensor& out, const Tensor& a, double s) {
  const char* name = op_name(op);
  KILN_CHECK(out.dtype() == DType::b8, name, ": the output must be bool, got ", out.dtype());
  dispatch_numeric(a.dtype(), name, [&]<class T>() {
    using D = device_t<T>;
    const dacc_t<D> v = scalar_as<T>(s);
    with_functor(op, [&]<class F>(F f) { launch_map<bool, D>(out, {&a}, fn::WithScalar<F, dacc_t<D>>{f, v}); });
  });
}

}  // namespace kiln::cuda
