// CUDA reductions (kernels in reduce.cu; see Note [CUDA reductions] in reduce_plan.h), declared in
// core/kernels/reduce.inc (Note [Kernel interfaces]). Floating sums and variances accumulate in
// float (f64: double).
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::cuda {
#include <kiln/core/kernels/reduce.inc>
}  // namespace kiln::cuda
