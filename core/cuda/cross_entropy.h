// CUDA fused softmax cross-entropy (the launchers behind core/ops/cross_entropy.h for CUDA
// tensors). The fronts have checked shapes, dtypes and devices; inputs may have any layout.
#pragma once

#include <kiln/core/ops/cross_entropy.h>

namespace kiln::cuda {

ops::CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                              double label_smoothing);

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t ignore_index, double label_smoothing, double scale);

}  // namespace kiln::cuda
