// Differentiable mse_loss, composed of raw elementwise ops and reductions; the node saves only
// input - target.
#include <kiln/autograd/ops/loss.h>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/reduce.h>

namespace kiln {

namespace {

const char* reduction_name(Reduction r) {
  constexpr const char* kNames[] = {"none", "mean", "sum"};  // Reduction's order
  return kNames[static_cast<int>(r)];
}

}  // namespace

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  // f32 under autocast (Note [Autocast op lists]).
  const Tensor input = autograd::autocast_to_f32(input_in), target = autograd::autocast_to_f32(target_in);
  check_defined(input, "mse_loss", "input");
  check_defined(target, "mse_loss", "target");
  KILN_CHECK_VALUE(input.shape() == target.shape(), "mse_loss: input has shape ", input.shape(), " but target has shape ",
                   target.shape(), " (reduction ", reduction_name(reduction), ")");
  KILN_CHECK_VALUE(is_floating(input.dtype()) && is_floating(target.dtype()), "mse_loss: expected floating tensors, got ",
                   input.dtype(), " and ", target.dtype());
  Tensor diff = ops::sub(autograd::saved(input), autograd::saved(target));
  Tensor sq = ops::square(diff);
  Tensor out = reduction == Reduction::none ? sq : reduction == Reduction::sum ? ops::sum(sq) : ops::mean(sq);
  return autograd::record(out, "MseLossBackward", {&input, &target}, [&](const autograd::Needs&) {
    return [diff, reduction](const Tensor& g) {
      double scale = 2.0;
      if (reduction == Reduction::mean) scale /= double(diff.numel());
      Tensor gi = ops::mul(diff, ops::mul(g, scale));
      return autograd::Grads{gi, ops::neg(gi)};
    };
  });
}

}  // namespace kiln
