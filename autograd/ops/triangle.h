// Differentiable triangular masks.
#pragma once

#include <kiln/core/tensor.h>

namespace kiln {

///@{
/// The upper (triu) or lower (tril) triangle of the last two dims, zeros elsewhere (torch.triu, torch.tril).
Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
///@}

}  // namespace kiln
