// Differentiable batch norm (NCHW, per channel).
#pragma once

#include <kiln/core/tensor.h>

namespace kiln {

/// Batch norm over (N, C, ...) per channel. Training: normalizes with the batch statistics and
/// updates running_mean/var in place (momentum, unbiased variance, as torch); eval: uses the
/// running statistics. weight/bias and the running buffers may be undefined.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);

}  // namespace kiln
