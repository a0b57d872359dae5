// CUDA unary elementwise ops (neg, abs, ..., gelu, square) over any strides: the shared functors
// (Note [Elementwise functors] in core/formulas.h) through the engine in core/cuda/loops.cuh. The
// front (core/ops/elementwise.cpp) has already cast integer inputs of the float functions to f32.
#include <kiln/core/cuda/kernels/elementwise.h>
#include <kiln/core/cuda/kernels/elementwise_functors.cuh>
#include <kiln/core/cuda/kernels/loops.cuh>

namespace kiln::cuda {

void unary(UnaryOp op, const Tensor& out, const Tensor& x) {
  const char* name = op_name(op);
  KILN_CHECK(out.dtype() == x.dtype(), name, ": output dtype ", out.dtype(), " differs from the input's ", x.dtype());
  ops::with_unary<fn::DeviceMath>(op, [&]<class F>(F f) {
    ops::dispatch_op<F>(x.dtype(), name, [&]<class T>() { launch_map<device_t<T>, device_t<T>>(out, {&x}, f); });
  });
}

}  // namespace kiln::cuda
