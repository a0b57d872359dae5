// CUDA comparisons of a tensor with a scalar (x > 0, x == 2.5), giving bool; the scalar is a
// kernel argument rounded to the tensor's dtype as the CPU front's 0-dim tensor is.
#include <kiln/core/cuda/kernels/elementwise.h>
#include <kiln/core/cuda/kernels/elementwise_functors.cuh>
#include <kiln/core/cuda/kernels/loops.cuh>

namespace kiln::cuda {

void compare_scalar(CompareOp op, const Tensor& out, const Tensor& a, double s) {
  const char* name = op_name(op);
  KILN_CHECK(out.dtype() == DType::b8, name, ": the output must be bool, got ", out.dtype());
  dispatch_numeric(a.dtype(), name, [&]<class T>() {
    using D = device_t<T>;
    const dacc_t<D> v = scalar_as<T>(s);
    ops::with_compare(op, [&]<class F>(F f) { launch_map<bool, D>(out, {&a}, fn::WithScalar<F, dacc_t<D>>{f, v}); });
  });
}

}  // namespace kiln::cuda
