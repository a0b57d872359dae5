// softmax / log_softmax along one dim, numerically stable (the max is subtracted first), and the
// kernels their backward passes need. Floating dtypes only; bf16/f16 are computed in float.
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::ops {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// grad_in = out * (grad_out - sum(grad_out * out, dim)), with out = softmax(x, dim).
Tensor softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim);
// grad_in = grad_out - exp(out) * sum(grad_out, dim), with out = log_softmax(x, dim).
Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim);

}  // namespace kiln::ops
