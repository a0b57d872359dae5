// Differentiable convolution, pooling and batch norm (NCHW).
#pragma once

#include <optional>

#include <kiln/core/window.h>
#include <kiln/core/tensor.h>

namespace kiln {

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& options = {});
Tensor max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = 0);
Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = 0);
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);

// Batch norm over (N, C, ...) per channel. Training: normalizes with the batch statistics and
// updates running_mean/var in place (momentum, unbiased variance, as torch); eval: uses the
// running statistics. weight/bias and the running buffers may be undefined.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);

}  // namespace kiln
