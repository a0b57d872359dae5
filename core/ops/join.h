// Joining and splitting along a dim. cat/stack copy into a fresh contiguous tensor; split and
// chunk return views (narrow) that share the input's storage, like torch.
#pragma once

#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::ops {

// Concatenates along `dim` (negative counts from the end). The inputs must have the same number
// of dims and equal sizes except in `dim`; mixed dtypes are promoted like the elementwise ops
// (promote_types: i32 with f32 gives f32). Fails on an empty list.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);

// Joins equal-shaped tensors along a new dim inserted at `dim` (in [-(ndim+1), ndim]).
// Dtypes are promoted as in cat.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);

// Views of `split_size` along `dim` each; the last is smaller when the size does not divide.
// A dim of size 0 gives one empty view.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
// Views of the given sizes, which must sum to x.size(dim). Note: split(x, {2}, d) with a
// one-element braced list picks the int64_t overload; pass std::vector<int64_t>{2} for sizes.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
// At most `chunks` views of ceil(size / chunks) each (fewer when the size runs out, like torch).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

}  // namespace kiln::ops
