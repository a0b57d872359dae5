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

#include <kiln/core/kernels/cross_entropy.inc>

}  // namespace kiln::cuda
