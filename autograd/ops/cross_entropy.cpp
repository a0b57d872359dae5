// Differentiable cross entropy on the fused raw ops of core/ops/cross_entropy.h (torch's
// ignore_index, label_smoothing and reduction semantics; CPU and CUDA alike). The forward saves
// the logits and each row's logsumexp; the backward writes its (N, C) gradient once, in the
// logits' dtype.
#include <kiln/autograd/ops/cross_entropy.h>

#include <kiln/autograd/function.h>
#include <kiln/core/autocast.h>
#include <kiln/core/ops/cross_entropy.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/reduce.h>

namespace kiln {

namespace {

// Per-row loss (N,) -> the requested reduction; `lead` is the shape of Reduction::none. `count`
// (0-dim i64) stays where it is: on CUDA the mean divides on the device, no host read.
Tensor reduce_rows(const Tensor& rows, Reduction reduction, const Shape& lead, const Tensor& count) {
  switch (reduction) {
    case Reduction::none: return rows.reshape(lead);
    case Reduction::sum: return ops::sum(rows);
    case Reduction::mean: return ops::div(ops::sum(rows), count.to(rows.dtype()));  // count 0 gives nan, as torch
  }
  KILN_UNREACHABLE("unknown reduction ", static_cast<int>(reduction));
  return Tensor();
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options) {
  check_defined(logits, "cross_entropy", "logits");
  check_defined(targets, "cross_entropy", "targets");
  KILN_CHECK_VALUE(is_floating(logits.dtype()), "cross_entropy: logits must be floating, got ", logits.dtype());
  KILN_CHECK_VALUE(targets.dtype() == DType::i64 || targets.dtype() == DType::i32,
                   "cross_entropy: targets must be i64 or i32 class indices, got ", targets.dtype());
  KILN_CHECK_VALUE(logits.dim() >= 1 && logits.size(-1) >= 1,
                   "cross_entropy: logits must be (..., C) with C >= 1, got shape ", logits.shape());
  const double ls = options.label_smoothing_;
  KILN_CHECK_VALUE(ls >= 0.0 && ls <= 1.0, "cross_entropy: label_smoothing must be in [0, 1], got ", ls);
  const int64_t width = logits.size(-1), c = options.classes_ == -1 ? width : options.classes_;
  KILN_CHECK_VALUE(c >= 1 && c <= width, "cross_entropy: classes (", options.classes_,
                   ") must be in [1, the logits' last dimension = ", width, "]");
  const Shape lead(logits.shape().begin(), logits.shape().end() - 1);
  const int64_t n = shape_numel(lead);
  KILN_CHECK_VALUE(targets.shape() == lead || (targets.dim() == 1 && targets.numel() == n),
                   "cross_entropy: targets of shape ", targets.shape(), " do not match logits of shape ", logits.shape(),
                   " (expected ", lead, " or [", n, "])");
  // Under autocast the loss is f32 (Note [Autocast op lists]). The fused kernels already compute
  // 16-bit logits in float, so the logits are not cast: no f32 copy of an (N, C) tensor.
  const bool low = logits.dtype() == DType::bf16 || logits.dtype() == DType::f16;
  const DType out_dtype = autocast_enabled() && low ? DType::f32 : logits.dtype();

  // Every CrossEntropyOptions option (ignore_index, label_smoothing, each reduction) is fused in
  // the raw ops on both devices, so no option falls back to a composed path. Targets are moved to
  // the logits' device (they may come from a CPU batch), as the host-side check used to allow.
  // With classes < width the kernels read the first c columns in place (CUDA; the CPU copies them).
  const Tensor rows_logits = autograd::saved(logits).reshape({n, width}).narrow(1, 0, c);
  const Tensor rows_targets = targets.to(logits.device()).reshape({n});
  ops::CrossEntropyResult r = ops::cross_entropy_forward(rows_logits, rows_targets, options.ignore_index_, ls);
  Tensor out = reduce_rows(r.loss, options.reduction_, lead, r.count).to(out_dtype);

  // The node saves the (N, C) logits as the forward saw them, the (N,) targets, each row's
  // logsumexp and the 0-dim i64 count of counted rows (on the logits' device).
  return autograd::record(out, "CrossEntropyBackward", {&logits}, [&](const autograd::Needs&) {
    return [logits = rows_logits, targets = rows_targets, lse = r.lse, count = r.count, width,
            ignore_index = options.ignore_index_, ls, reduction = options.reduction_](
               const Tensor& g, const autograd::OpNode& node) {
      // none: one gradient per row; sum: the same for every row; mean: that over the counted rows.
      const Tensor grad_loss = reduction == Reduction::none ? g.reshape({logits.size(0)}) : g;
      // (N, width): the gradient of columns past c is zero, written by the same kernel.
      Tensor grad = ops::cross_entropy_backward(grad_loss, logits, targets, lse, ignore_index, ls, 1.0,
                                                reduction == Reduction::mean ? count : Tensor(), width);
      return grad.reshape(node.input_info[0].shape);
    };
  });
}

}  // namespace kiln
