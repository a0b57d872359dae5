// Fused softmax cross-entropy on the CPU (the kernels behind core/ops/cross_entropy.h for CPU
// tensors; the twin of core/cuda/kernels/cross_entropy.h). The front has checked shapes and dtypes;
// these check the target values (ops::check_targets) and accept any layout.
#pragma once

#include <cstdint>

#include <kiln/core/ops/cross_entropy.h>

#include <kiln/core/cpu/kernel_set.h>

namespace kiln::cpu {
KILN_CPU_DECLARE_KERNELS(
ops::CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                              double label_smoothing);
)
}  // namespace kiln::cpu

#define KILN_CPU_KERNELS <kiln/core/kernels/cross_entropy.inc>
#include <kiln/core/cpu/declare_kernels.h>
