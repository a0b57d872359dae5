// CUDA indexing kernels (index.cu), declared in core/kernels/index.inc (Note [Kernel interfaces]).
// Every tensor is on one CUDA device; inputs and indices may be strided. Indices are checked on
// the device: the fault record is a device tensor, complete when the op's kernels are, which the
// front hands to core/cuda/runtime/deferred_check.h (no host read in the op by default: Note
// [Deferred device checks]). Lookups read bad positions as zeros; the accumulations write nothing
// at all when any index is bad (their adding kernels run after the check and skip on the device).
//
// Determinism: index_add_ and embedding_backward are bitwise equal to the CPU (index_add_ sorts
// positions by index, a stable radix sort, and each element of self adds its sources in position
// order; embedding_backward leaves out the rows of bad ids). scatter_add_ is deterministic and
// bitwise equal to the CPU (adds in index order, rounding to the dtype each step) when the fibers
// along dim are short (<= 64) or many (>= 8192); otherwise atomics add in an unspecified order
// (floating results may then differ in the last bits from run to run, as in torch).
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::cuda {
#include <kiln/core/kernels/index.inc>
}  // namespace kiln::cuda
