// Indexing kernels on the CPU (index.cpp), behind the fronts in core/ops/index.cpp, which check
// shapes and dtypes; the twins of core/cuda/kernels/index.h. Every kernel reads its indices first
// and returns a fault record as the CUDA launchers do: (2,) i64 on the CPU, [0] the row-major
// position in the index tensor of the first out-of-range index (-1: none), [1] its value. On a
// fault nothing is written, and the front throws its message at once.
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::cpu {

// out (contiguous; x's shape with size index.numel() at dim) = x[..., index, ...]. Any dtype.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);

// out (contiguous; index's shape) = x at index along dim. Any dtype.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);

// self[.., index[..j..], ..] += src[..j..] along dim, in index order. Numeric dtypes; src does
// not share self's storage.
Tensor scatter_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);

// self.select(dim, index[i]) += src.select(dim, i) for each i, in order. Numeric dtypes; src does
// not share self's storage.
Tensor index_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);

// out (contiguous; (*ids.shape, C)) = rows of weight (V, C). Any dtype.
Tensor embedding(const Tensor& weight, const Tensor& ids, const Tensor& out);

// out (contiguous; (num_embeddings, C)) = the rows of grad_out (*ids.shape, C) summed per id, in
// position order, accumulated in acc_t. Numeric dtypes.
Tensor embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t num_embeddings, const Tensor& out);

}  // namespace kiln::cpu
