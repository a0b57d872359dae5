// triu/tril on the CPU (the kernel behind core/ops/triangle.h for CPU tensors; the twin of
// core/cuda/kernels/triangle.h). The front checks the arguments and allocates the output.
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::cpu {

// out (contiguous, x's shape and dtype; at least 2 dims, not empty) = x where row i keeps the
// columns j with j - i >= diagonal (upper) or j - i <= diagonal (lower), and 0 elsewhere. x: any strides.
void triangle(const Tensor& out, const Tensor& x, int64_t diagonal, bool upper);

}  // namespace kiln::cpu
