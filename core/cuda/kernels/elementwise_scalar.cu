// CUDA tensor-scalar elementwise ops (x + 2, 1 - x, x ** 0.5, ...): the scalar is a kernel
// argument, rounded to the tensor's dtype on the host exactly as the CPU front's 0-dim tensor is.
#include <kiln/core/cuda/kernels/elementwise.h>
#include <kiln/core/cuda/kernels/elementwise_functors.cuh>
#include <kiln/core/cuda/kernels/loops.cuh>

namespace kiln::cuda {

namespace {

template <class Op>
void numeric(const char* name, const Tensor& out, const Tensor& a, double s, Op op) {
  dispatch_numeric(a.dtype(), name, [&]<class T>() {
    using D = device_t<T>;
    launch_map<D, D>(out, {&a}, fn::WithScalar<Op, dacc_t<D>>{op, scalar_as<T>(s)});
  });
}

template <class Op>
void floating(const char* name, const Tensor& out, const Tensor& a, double s, Op op) {
  dispatch_floating(a.dtype(), name, [&]<class T>() {
    using D = device_t<T>;
    launch_map<D, D>(out, {&a}, fn::WithScalar<Op, dacc_t<D>>{op, scalar_as<T>(s)});
  });
}

}  // namespace

void binary_scalar(BinaryOp op, const Tensor& out, const Tensor& a, double s) {
  const char* name = op_name(op);
  KILN_CHECK(out.dtype() == a.dtype(), name, ": output dtype ", out.dtype(), " differs from the input's ", a.dtype());
  switch (op) {
    case BinaryOp::add: return numeric(name, out, a, s, fn::Add{});
    case BinaryOp::sub: return numeric(name, out, a, s, fn::Sub{});
    case BinaryOp::rsub: return numeric(name, out, a, s, fn::Rsub{});
    case BinaryOp::mul: return numeric(name, out, a, s, fn::Mul{});
    case BinaryOp::pow: return numeric(name, out, a, s, fn::Pow{});
    case BinaryOp::maximum: return numeric(name, out, a, s, fn::Maximum{});
    case BinaryOp::minimum: return numeric(name, out, a, s, fn::Minimum{});
    case BinaryOp::div: return floating(name, out, a, s, fn::Div{});
    case BinaryOp::gelu_tanh_backward:
    case BinaryOp::gelu_erf_backward: break;
  }
  KILN_UNREACHABLE("binary_scalar: ", name, " has no tensor-scalar kernel");
}

}  // namespace kiln::cuda
