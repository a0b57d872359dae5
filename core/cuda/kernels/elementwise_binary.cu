// CUDA binary elementwise ops on two tensors (add ... minimum, the GELU backwards) and add_ with
// alpha: the shared functors (Note [Elementwise functors] in core/formulas.h) through the engine in
// core/cuda/loops.cuh. Operands arrive broadcast and in one dtype.
#include <kiln/core/cuda/kernels/elementwise.h>
#include <kiln/core/cuda/kernels/elementwise_functors.cuh>
#include <kiln/core/cuda/kernels/loops.cuh>

namespace kiln::cuda {

namespace {

void check_dtypes(const char* name, const Tensor& out, const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dtype() == b.dtype() && out.dtype() == a.dtype(), name, ": expected one dtype, got ", a.dtype(),
             " and ", b.dtype(), " into ", out.dtype());
}

}  // namespace

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op);
  check_dtypes(name, out, a, b);
  ops::with_binary<fn::DeviceMath>(op, [&]<class F>(F f) {
    if constexpr (std::is_same_v<F, formulas::Rsub>) {
      KILN_UNREACHABLE("binary: ", name, " has no tensor-tensor kernel");
    } else {
      ops::dispatch_op<F>(a.dtype(), name, [&]<class T>() {
        using D = device_t<T>;
        launch_map<D, D, D>(out, {&a, &b}, f);
      });
    }
  });
}

void add_scaled(const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  check_dtypes("add_", out, a, b);
  dispatch_numeric(a.dtype(), "add_", [&]<class T>() {
    using D = device_t<T>;
    const formulas::AddScaled<dacc_t<D>> op{static_cast<dacc_t<D>>(static_cast<acc_t<T>>(alpha))};
    launch_map<D, D, D>(out, {&a, &b}, op);
  });
}

}  // namespace kiln::cuda
