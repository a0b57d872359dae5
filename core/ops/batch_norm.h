// Batch norm over (N, C, *) per channel as two raw kernels, forward and backward, on CPU and CUDA
// (core/cuda/kernels/batch_norm.h): statistics, normalization, the running-statistics update and the three
// gradients without intermediate tensors. The differentiable kiln::batch_norm is built on them.
#pragma once

#include <array>

#include <kiln/core/tensor.h>

namespace kiln::ops {

struct BatchNormResult {
  Tensor out;     // x's shape and dtype
  Tensor mean;    // (C): the batch mean (training) or running_mean (eval)
  Tensor invstd;  // (C): 1 / sqrt(var + eps), var the batch's biased variance or running_var
};

// x (N, C, *), floating. weight and bias (C) or undefined (1 and 0); running_mean and running_var
// (C), both or neither. Training normalizes with the batch statistics (needs more than one value
// per channel) and, when given, updates the running buffers in place as torch does:
//   running = (1 - momentum) * running + momentum * stat, with the unbiased batch variance.
// Eval normalizes with the running statistics (required). Statistics are summed in double;
// mean/invstd and all per-channel math are in f64 for f64 inputs, f32 otherwise (the compute
// dtype); out = ((x - mean) * invstd) * weight + bias in that dtype, rounded once to x's dtype.
BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

struct BatchNormGrads {
  Tensor input;   // x's shape and dtype
  Tensor weight;  // (C), compute dtype
  Tensor bias;    // (C), compute dtype
};

// Note [Batch norm gradient]
// With x_hat = (x - mean) * invstd and M values per channel:
//   training: dx = weight * invstd * (dy - sum(dy) / M - x_hat * sum(dy * x_hat) / M)
//             (mean and invstd depend on x through the batch statistics);
//   eval:     dx = weight * invstd * dy (the running statistics are constants);
//   dweight = sum(dy * x_hat), dbias = sum(dy) (sums in double).
// grad_out is converted to x's dtype; mean and invstd are batch_norm's. Only the gradients asked
// for in `needs` (input, weight, bias) are computed; the others are undefined.
BatchNormGrads batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& invstd, bool training, std::array<bool, 3> needs);

}  // namespace kiln::ops
