// CUDA fused softmax cross-entropy (the launchers behind core/ops/cross_entropy.h for CUDA
// tensors). The fronts have checked shapes, dtypes and devices; inputs may have any layout.
#pragma once

#include <kiln/core/ops/cross_entropy.h>

namespace kiln::cuda {

// Reads nothing back: the count stays on the device, and `fault` receives the target check's
// record, (2,) i64: [0] the first row whose target is neither ignore_index nor in [0, C) (-1:
// none), [1] that target (the front reports it: Note [Deferred device checks]).
ops::CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                              double label_smoothing, Tensor& fault);

// count: undefined, or the forward's 0-dim i64 count on the device (scale is then multiplied by
// 1 / count in the kernel).
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t ignore_index, double label_smoothing, double scale, const Tensor& count);

}  // namespace kiln::cuda
