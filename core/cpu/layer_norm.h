// Layer norm forward and backward on the CPU (the kernels behind core/ops/layer_norm.h for CPU
// tensors; the twin of core/cuda/kernels/layer_norm.h). The front has checked shapes; any layout.
#pragma once

#include <cstdint>

#include <kiln/core/ops/layer_norm.h>

namespace kiln::cpu {

// x viewed as (rows, n); weight and bias (n,) or undefined.
ops::LayerNormResult layer_norm(const Tensor& x, int64_t n, const Tensor& weight, const Tensor& bias, double eps);

// mean and rstd hold rows values each; grad_weight in weight's dtype, grad_bias in weight's dtype
// (x's when weight is undefined).
ops::LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                        const Tensor& rstd, const Tensor& weight, const Shape& normalized_shape,
                                        bool with_bias);

}  // namespace kiln::cpu
