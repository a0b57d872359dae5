// CrossEntropyLoss / MSELoss: shape and dtype checks, then the differentiable loss functions.
#include <kiln/nn/loss.h>

namespace kiln::nn {

Tensor CrossEntropyLoss::forward(const Tensor& logits, const Tensor& targets) {
  check_defined(logits, "CrossEntropyLoss::forward", "logits");
  check_defined(targets, "CrossEntropyLoss::forward", "targets");
  bool ok = logits.dim() >= 1 && targets.dim() == logits.dim() - 1;
  for (int64_t d = 0; ok && d < targets.dim(); ++d) ok = targets.size(d) == logits.size(d);
  KILN_CHECK_VALUE(ok, "CrossEntropyLoss: expected logits (..., C) and targets (...) with the same leading dims, got "
                   "logits ", logits.shape(), " and targets ", targets.shape());
  KILN_CHECK_VALUE(targets.dtype() == DType::i64 || targets.dtype() == DType::i32,
                   "CrossEntropyLoss: expected integer class ids (i64 or i32) as targets, got ", targets.dtype());
  return kiln::cross_entropy(logits, targets, options);
}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  check_defined(input, "MSELoss::forward", "input");
  check_defined(target, "MSELoss::forward", "target");
  KILN_CHECK_VALUE(input.shape() == target.shape(), "MSELoss: input of shape ", input.shape(), " and target of shape ",
                   target.shape(), " must have the same shape");
  return kiln::mse_loss(input, target, options.reduction_);
}

}  // namespace kiln::nn
