// Batch norm on CUDA (kernels in batch_norm.cu), declared in core/kernels/batch_norm.inc (Note
// [Kernel interfaces]); CPU code includes this header (no CUDA headers). Every tensor on one CUDA
// device. Per-channel sums are taken in double over a fixed split of each channel and combined in
// a fixed order, so the results do not vary from run to run.
#pragma once

#include <array>

#include <kiln/core/ops/batch_norm.h>

namespace kiln::cuda {
#include <kiln/core/kernels/batch_norm.inc>
}  // namespace kiln::cuda
