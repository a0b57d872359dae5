// CUDA layer norm forward and backward (the launchers behind core/ops/layer_norm.h for CUDA
// tensors). The fronts have checked shapes and devices; x may have any layout.
#pragma once

#include <kiln/core/ops/layer_norm.h>

namespace kiln::cuda {

// x viewed as (rows, n); weight and bias (n,) or undefined.
ops::LayerNormResult layer_norm(const Tensor& x, int64_t n, const Tensor& weight, const Tensor& bias, double eps);

// mean and rstd hold rows values each; grad_weight is in weight's dtype, grad_bias in weight's
// dtype (x's when weight is undefined), as on the CPU.
ops::LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                        const Tensor& rstd, const Tensor& weight, const Shape& normalized_shape,
                                        bool with_bias);

}  // namespace kiln::cuda
