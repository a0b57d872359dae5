// Differentiable joins and splits. (Views such as reshape, transpose, permute, slice, select,
// expand, squeeze, unsqueeze and flatten are Tensor methods and record themselves.)
#pragma once

#include <vector>

#include <kiln/core/tensor.h>

namespace kiln {

///@{
/// torch.cat, torch.stack, torch.split (by size, or by a list of sizes) and torch.chunk; the pieces
/// of split and chunk are views of x.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
///@}

}  // namespace kiln
