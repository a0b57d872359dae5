// Layer normalization over the trailing `normalized_shape` dims (torch.nn.functional.layer_norm):
// biased variance, statistics in double, saved mean / rstd per row for the backward kernel.
#pragma once

#include <kiln/core/tensor.h>

namespace kiln::ops {

struct LayerNormResult {
  Tensor out;   // x's shape and dtype
  Tensor mean;  // (rows,), f32 (f64 for f64 input); rows = x.numel() / numel(normalized_shape)
  Tensor rstd;  // (rows,), 1 / sqrt(var + eps)
};

// weight and bias (shape normalized_shape) may each be undefined Tensors.
LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                           const Tensor& bias, double eps = 1e-5);

struct LayerNormGrads {
  Tensor grad_x;
  Tensor grad_weight;  // undefined when weight is undefined
  Tensor grad_bias;    // undefined unless with_bias
};

// mean and rstd are those layer_norm returned for x.
LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, const Shape& normalized_shape, bool with_bias = true);

}  // namespace kiln::ops
