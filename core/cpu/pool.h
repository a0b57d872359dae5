// 2-D pooling on the CPU (the kernels behind core/ops/pool.h for CPU tensors; the twin of
// core/cuda/kernels/pool.h): inputs (N, C, H, W) or (C, H, W) of any layout, windows and shapes
// checked by the front; outputs fresh and contiguous.
#pragma once

#include <kiln/core/cuda/plan/pool_index.h>
#include <kiln/core/ops/pool.h>

namespace kiln::cpu {

using PoolWindow = cuda::pool_index::Window;

ops::MaxPool2dResult max_pool2d(const Tensor& x, const PoolWindow& window);
// Fails (an index error) on an index outside the input plane.
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& input_shape);
Tensor avg_pool2d(const Tensor& x, const PoolWindow& window);
Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, const PoolWindow& window);
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape);

}  // namespace kiln::cpu
