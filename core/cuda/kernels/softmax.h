// CUDA softmax / log_softmax along one dim and their backward kernels (the launchers behind
// core/ops/softmax.h for CUDA tensors). dim is already wrapped; inputs may have any layout.
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::cuda {

// log = true: log_softmax and its backward.
Tensor softmax(const Tensor& x, int64_t dim, bool log);
Tensor softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim, bool log);

}  // namespace kiln::cuda
