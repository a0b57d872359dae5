// 2-D pooling on CUDA with the CPU kernels' semantics (core/ops/pool.h): max with flat argmax
// indices iy * W + ix, average counting the padding, adaptive average. Kernels in pool.cu; CPU
// code includes this header (no CUDA headers).
#pragma once

#include <kiln/core/cuda/plan/pool_index.h>
#include <kiln/core/ops/pool.h>

namespace kiln::cuda {

// A pooling window the ops front has checked, with its output plane (oh, ow).
using PoolWindow = pool_index::Window;

// Inputs (N, C, H, W) or (C, H, W), floating, any strides; outputs fresh and contiguous.
// Forward kernels and the average backward kernels give the CPU's results bit for bit (same terms
// in the same order, in float for 16-bit types). max_pool2d_backward adds with atomics, so where
// windows overlap the order of the sums, and the last bits, may vary; indices outside the plane
// are skipped (the CPU raises an error: checking on the device would need a sync).
ops::MaxPool2dResult max_pool2d(const Tensor& x, const PoolWindow& window);
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& input_shape);
Tensor avg_pool2d(const Tensor& x, const PoolWindow& window);
Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, const PoolWindow& window);
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape);

}  // namespace kiln::cuda
