// 2-D pooling on CUDA (kernels in pool.cu), declared in core/kernels/pool.inc (Note [Kernel
// interfaces]); CPU code includes this header (no CUDA headers). Forward kernels and the average
// backward kernels give the CPU's results bit for bit (same terms in the same order, in float for
// 16-bit types). max_pool2d_backward adds with atomics, so where windows overlap the order of the
// sums, and the last bits, may vary; indices outside the plane are skipped (the CPU raises an
// error: checking on the device would need a sync).
#pragma once

#include <kiln/core/kernels/pool_index.h>
#include <kiln/core/ops/pool.h>

namespace kiln::cuda {
#include <kiln/core/kernels/pool.inc>
}  // namespace kiln::cuda
