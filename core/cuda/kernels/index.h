// CUDA indexing kernels (index.cu) behind the fronts in core/ops/index.cpp, which check shapes and
// dtypes and throw the CPU's message for an out-of-range index. Every tensor is on one CUDA device;
// inputs and indices may be strided. Indices are checked on the device: a kernel records the first
// bad position and its value in a fault record, which the launchers return for the front to hand
// to core/cuda/runtime/deferred_check.h (no host read in the op by default: Note [Deferred device checks]).
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::cuda {

// Every launcher returns its fault record: (2,) i64 on the device, [0] the row-major position in
// the index tensor of the first out-of-range index (-1: none), [1] its value; complete when the
// op's kernels are. Lookups read bad positions as zeros; the accumulations write nothing at all
// when any index is bad (their adding kernels run after the check and skip on the device).

// out (contiguous; x's shape with size index.numel() at dim) = x[..., index, ...]. Any dtype.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);

// out (contiguous; index's shape) = x at index along dim. Any dtype.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);

// self[.., index[..j..], ..] += src[..j..] along dim. Checks every index before writing (nothing is
// written on a fault). Numeric dtypes. Deterministic and bitwise equal to the CPU (adds in index
// order, rounding to the dtype each step) when the fibers along dim are short (<= 64) or many
// (>= 8192); otherwise atomics add in an unspecified order (floating results may then differ in
// the last bits from run to run, as in torch).
Tensor scatter_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);

// self.select(dim, index[i]) += src.select(dim, i) for each i. Checks every index before writing.
// Numeric dtypes. Deterministic and bitwise equal to the CPU: positions are sorted by index
// (stable radix sort) and each element of self adds its sources in position order.
Tensor index_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);

// out (contiguous; (*ids.shape, C)) = rows of weight (V, C). Any dtype.
Tensor embedding(const Tensor& weight, const Tensor& ids, const Tensor& out);

// out (contiguous; (num_embeddings, C)) = the rows of grad_out (*ids.shape, C) summed per id, in
// position order, accumulated in float for 16-bit dtypes (bitwise equal to the CPU); rows of bad
// ids are left out. Numeric dtypes.
Tensor embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t num_embeddings, const Tensor& out);

}  // namespace kiln::cuda
