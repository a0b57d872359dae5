// Differentiable index selection: index_select, gather and the embedding lookup.
#pragma once

#include <kiln/core/tensor.h>

namespace kiln {

///@{
/// torch.index_select and torch.gather along `dim`; the gradient scatters back (adding repeated indices).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
///@}
/// weight (V, C), ids (...) of i64/i32 -> (..., C); the gradient sums rows of repeated ids.
Tensor embedding(const Tensor& weight, const Tensor& ids);

}  // namespace kiln
