// Fused softmax cross-entropy on the CPU (the kernels behind core/ops/cross_entropy.h for CPU
// tensors; the twin of core/cuda/kernels/cross_entropy.h). The front has checked shapes and dtypes;
// these check the target values (ops::check_targets) and accept any layout.
#pragma once

#include <cstdint>

#include <kiln/core/ops/cross_entropy.h>

namespace kiln::cpu {

ops::CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                              double label_smoothing);

// count: undefined, or the forward's 0-dim i64 count (scale is then multiplied by 1 / count).
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t ignore_index, double label_smoothing, double scale, const Tensor& count);

}  // namespace kiln::cpu
