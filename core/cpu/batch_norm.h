// Batch norm forward and backward on the CPU (the kernels behind core/ops/batch_norm.h for CPU
// tensors; the twin of core/cuda/kernels/batch_norm.h). The front has checked every argument.
#pragma once

#include <array>

#include <kiln/core/ops/batch_norm.h>

namespace kiln::cpu {

ops::BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                                const Tensor& running_var, bool training, double momentum, double eps);
ops::BatchNormGrads batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                        const Tensor& mean, const Tensor& invstd, bool training,
                                        std::array<bool, 3> needs);

}  // namespace kiln::cpu
