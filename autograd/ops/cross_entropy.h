// Differentiable cross entropy (a fused log-softmax + NLL).
#pragma once

#include <kiln/autograd/ops/loss.h>
#include <kiln/core/tensor.h>

namespace kiln {

/// Options of cross_entropy, as torch's F.cross_entropy: ignore_index, label_smoothing, reduction.
/// Kiln adds `classes`: only the first `classes` columns of the logits are classes, as
/// cross_entropy(logits.slice(-1, 0, classes), ...) gives (the columns after get zero gradient), but
/// without a copy of the slice or of its gradient (GPT's padded vocabulary: Note [Padded vocabulary]).
struct CrossEntropyOptions {
  int64_t ignore_index_ = -100;
  double label_smoothing_ = 0.0;
  Reduction reduction_ = Reduction::mean;
  int64_t classes_ = -1;  ///< -1: every column is a class; otherwise 1 .. the logits' last dimension
  CrossEntropyOptions& ignore_index(int64_t v) { ignore_index_ = v; return *this; }
  CrossEntropyOptions& label_smoothing(double v) { label_smoothing_ = v; return *this; }
  CrossEntropyOptions& reduction(Reduction r) { reduction_ = r; return *this; }
  CrossEntropyOptions& classes(int64_t v) { classes_ = v; return *this; }
};
/// logits (N, C) (or (..., C), flattened), targets (N) of class ids: a fused log-softmax + NLL,
/// with torch's semantics for ignore_index (mean over non-ignored), label_smoothing and reduction.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options = {});

}  // namespace kiln
