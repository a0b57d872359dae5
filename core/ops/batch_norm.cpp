// batch_norm's fronts: argument checks, then the kernels of the input's backend
// (core/cpu/batch_norm.cpp, core/cuda/kernels/batch_norm.cu) through one dispatch line (Note [One
// dispatch line]).
#include <kiln/core/ops/batch_norm.h>

#include <kiln/core/cpu/batch_norm.h>
#include <kiln/core/cuda/kernels/batch_norm.h>
#include <kiln/core/ops/backend.h>

namespace kiln::ops {

namespace {

// Values per channel of x (N, C, ...): N times the product of the dims after C.
int64_t values_per_channel(const Tensor& x) {
  int64_t count = x.size(0);
  for (int64_t d = 2; d < x.dim(); ++d) count *= x.size(d);
  return count;
}

void check_input(const char* op, const Tensor& x) {
  KILN_CHECK_VALUE(x.defined(), op, ": the input is an undefined tensor");
  KILN_CHECK_VALUE(x.dim() >= 2, op, ": expected an input (N, C, ...) with at least 2 dims, got shape ", x.shape());
  KILN_CHECK_VALUE(is_floating(x.dtype()), op, ": expected a floating-point input, got ", x.dtype());
}

// An optional per-channel tensor: (C), floating, on x's device.
void check_per_channel(const Tensor& t, const char* what, const Tensor& x) {
  if (!t.defined()) return;
  KILN_CHECK_VALUE(t.dim() == 1 && t.size(0) == x.size(1), "batch_norm: ", what, " must have shape [", x.size(1),
                   "] (one value per channel of the input ", x.shape(), "), got shape ", t.shape());
  KILN_CHECK(t.device() == x.device(), "batch_norm: ", what, " is on ", t.device(), " but the input is on ",
             x.device());
  KILN_CHECK_VALUE(is_floating(t.dtype()), "batch_norm: ", what, " must be floating-point, got ", t.dtype());
  check_in_storage(t, "batch_norm", what);  // not a dispatch operand (Note [Reads within the storage])
}

}  // namespace

BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum, double eps) {
  check_input("batch_norm", x);
  KILN_CHECK_VALUE(eps >= 0, "batch_norm: eps must be non-negative, got ", eps);
  check_per_channel(weight, "weight", x);
  check_per_channel(bias, "bias", x);
  check_per_channel(running_mean, "running_mean", x);
  check_per_channel(running_var, "running_var", x);
  KILN_CHECK_VALUE(running_mean.defined() == running_var.defined(),
                   "batch_norm: running_mean and running_var must be both given or both undefined");
  if (training) {
    KILN_CHECK_VALUE(values_per_channel(x) > 1,
                     "batch_norm: expected more than 1 value per channel when training, got input shape ", x.shape());
  } else {
    KILN_CHECK_VALUE(running_mean.defined(), "batch_norm: eval mode (training = false) needs running_mean and running_var");
  }
  return dispatch_device(
      "batch_norm", {&x},
      [&] { return cuda::batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps); },
      [&] { return KILN_CPU_KERNEL(batch_norm)(x, weight, bias, running_mean, running_var, training, momentum, eps); });
}

BatchNormGrads batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& invstd, bool training, std::array<bool, 3> needs) {
  check_input("batch_norm_backward", x);
  KILN_CHECK_VALUE(grad_out.defined() && grad_out.shape() == x.shape(), "batch_norm_backward: grad_out of shape ",
                   grad_out.defined() ? grad_out.shape() : Shape{}, " does not match the input's ", x.shape());
  KILN_CHECK(grad_out.device() == x.device(), "batch_norm_backward: grad_out is on ", grad_out.device(),
             " but the input is on ", x.device());
  KILN_CHECK_VALUE(mean.defined() && invstd.defined(), "batch_norm_backward: needs the forward's mean and invstd");
  check_per_channel(mean, "mean", x);
  check_per_channel(invstd, "invstd", x);
  check_per_channel(weight, "weight", x);
  return dispatch_device(
      "batch_norm_backward", {&x, &grad_out},
      [&] { return cuda::batch_norm_backward(grad_out, x, weight, mean, invstd, training, needs); },
      [&] { return KILN_CPU_KERNEL(batch_norm_backward)(grad_out, x, weight, mean, invstd, training, needs); });
}

}  // namespace kiln::ops
