// Indexing ops: select rows by index, gather/scatter along a dim, and the embedding lookup with
// its backward. Index tensors are i64 or i32; every index is bounds-checked (no negative
// indices) and a bad one is reported with its value, its position and the valid range (on CUDA
// by default at the next blocking read: Note [Deferred device checks], core/cuda/runtime/deferred_check.h).
#pragma once

#include <kiln/core/tensor.h>

namespace kiln::ops {

// out = x with `dim` replaced by the entries of `index` (1-D or 0-dim): out[.., i, ..] =
// x[.., index[i], ..]. Any data dtype; the result is a fresh contiguous tensor.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

// out[i][j][k] = x[i][index[i][j][k]][k] for dim == 1 (likewise for any dim). `index` has x's
// number of dims and index.size(d) <= x.size(d) for d != dim; out has index's shape.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

// self[i][index[i][j][k]][k] += src[i][j][k] for dim == 1 (likewise for any dim). index.size(d)
// <= src.size(d) for every d and <= self.size(d) for d != dim; self and src share a dtype
// (numeric, not bool). Repeated indices add up in index order, whatever the thread count; on CUDA
// too, except for few long fibers along dim, where atomics add floats in no fixed order (see
// core/cuda/kernels/index.h).
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);  // a new tensor
Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);      // in place

// self.select(dim, index[i]) += src.select(dim, i) for each i, in order. `index` is 1-D (or
// 0-dim), src has self's shape except src.size(dim) == index.numel(); same numeric dtype.
Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);

// Lookup: weight (V, C), ids of any shape -> (*ids.shape, C). Any weight dtype.
Tensor embedding(const Tensor& weight, const Tensor& ids);

// The weight's gradient: grad_out (*ids.shape, C) -> (num_embeddings, C), the rows of grad_out
// summed per id. Each output row is summed by one thread in position order (accumulating in
// float for 16-bit types), so the result is bitwise the same for any thread count, and on CUDA
// (which sorts the positions by id first) bitwise the same as on the CPU.
Tensor embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t num_embeddings);

}  // namespace kiln::ops
