// CUDA softmax / log_softmax along one dim and their backward kernels (the launchers behind
// core/ops/softmax.h for CUDA tensors). dim is already wrapped; inputs may have any layout.
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::cuda {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim);

}  // namespace kiln::cuda
