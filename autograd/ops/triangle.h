// Differentiable triangular masks.
#pragma once

#include <kiln/core/tensor.h>

namespace kiln {

Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor tril(const Tensor& x, int64_t diagonal = 0);

}  // namespace kiln
