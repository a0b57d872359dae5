// CUDA launcher for triu/tril (core/ops/triangle.h): the front checks the arguments and allocates
// the output. No CUDA headers here.
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::cuda {

// out (contiguous, x's shape and dtype; at least 2 dims) = x where row i keeps the columns
// j with j - i >= diagonal (upper) or j - i <= diagonal (lower), and 0 elsewhere. x: any strides.
void triangle(const Tensor& out, const Tensor& x, int64_t diagonal, bool upper);

}  // namespace kiln::cuda
