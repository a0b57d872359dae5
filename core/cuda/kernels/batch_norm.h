// Batch norm on CUDA: the kernels behind kiln::ops::batch_norm and batch_norm_backward for CUDA
// tensors, with the same semantics and formulas (core/ops/batch_norm.h, Note [Batch norm
// gradient]). Kernels in batch_norm.cu; CPU code includes this header (no CUDA headers).
#pragma once

#include <array>

#include <kiln/core/ops/batch_norm.h>

namespace kiln::cuda {

// Arguments checked by the ops front; every tensor on one CUDA device, any strides. Per-channel
// sums are taken in double over a fixed split of each channel and combined in a fixed order, so
// the results do not vary from run to run.
ops::BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                                const Tensor& running_var, bool training, double momentum, double eps);
ops::BatchNormGrads batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                        const Tensor& mean, const Tensor& invstd, bool training,
                                        std::array<bool, 3> needs);

}  // namespace kiln::cuda
