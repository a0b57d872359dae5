// CUDA tensor-scalar elementwise ops (x + 2, 1 - x, x ** 0.5, ...): the scalar is a kernel
// argument, rounded to the tensor's dtype on the host exactly as the CPU front's 0-dim tensor is.
#include <kiln/core/cuda/kernels/elementwise.h>
#include <kiln/core/cuda/kernels/elementwise_functors.cuh>
#include <kiln/core/cuda/kernels/loops.cuh>

namespace kiln::cuda {

void binary_scalar(BinaryOp op, const Tensor& out, const Tensor& a, double s) {
  const char* name = op_name(op);
  KILN_CHECK(out.dtype() == a.dtype(), name, ": output dtype ", out.dtype(), " differs from the input's ", a.dtype());
  ops::with_binary<fn::DeviceMath>(op, [&]<class F>(F f) {
    if constexpr (std::is_same_v<F, formulas::GeluTanhBackward<fn::DeviceMath>> ||
                  std::is_same_v<F, formulas::GeluErfBackward<fn::DeviceMath>>) {
      KILN_UNREACHABLE("binary_scalar: ", name, " has no tensor-scalar kernel");
    } else {
      ops::dispatch_op<F>(a.dtype(), name, [&]<class T>() {
        using D = device_t<T>;
        launch_map<D, D>(out, {&a}, fn::WithScalar<F, dacc_t<D>>{f, scalar_as<T>(s)});
      });
    }
  });
}

}  // namespace kiln::cuda
