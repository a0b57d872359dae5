// Layer normalization over the trailing `normalized_shape` dims (torch.nn.functional.layer_norm):
// biased variance, statistics in double, saved mean / rstd per row for the backward kernel.
#pragma once

#include <kiln/core/tensor.h>

namespace kiln::ops {

struct LayerNormResult {
  Tensor out;   // x's shape and dtype
  Tensor mean;  // (rows,), f32 (f64 for f64 input); rows = x.numel() / numel(normalized_shape)
  Tensor rstd;  // (rows,), 1 / sqrt(var + eps)
  Tensor sum;   // add_layer_norm only: x + residual, which out normalizes
};

// weight and bias (shape normalized_shape) may each be undefined Tensors.
LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                           const Tensor& bias, double eps = 1e-5);

// Note [Fused residual add]
// A pre-LN transformer adds each sublayer's output to the residual stream and normalizes the sum
// for the next sublayer. add_layer_norm does both in one pass over the rows: sum = x + residual
// (in their promoted dtype) and out = layer_norm(sum); its backward adds the sum's own gradient
// into grad_x in the same pass (layer_norm_backward's grad_residual). Bitwise the composition on the
// CPU. On CUDA the fused kernels run by default since the first GPU run proved them (an H200,
// 2026-11-28: the GPU test and compute-sanitizer clean, gpt-tiny's bf16 loss curve unchanged, fwd +
// bwd 1.08x the composition at (16384, 768) and 1.14x at (16384, 2048)); KILN_FUSED_ADD_LN=0 or
// set_fused_add_layer_norm_cuda(false) computes the same thing as ops::add then layer_norm (and the
// backward as layer_norm_backward then add).
LayerNormResult add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                               const Tensor& weight, const Tensor& bias, double eps = 1e-5);
bool fused_add_layer_norm_cuda();
void set_fused_add_layer_norm_cuda(bool on);

struct LayerNormGrads {
  Tensor grad_x;
  Tensor grad_weight;  // undefined when weight is undefined
  Tensor grad_bias;    // undefined unless with_bias
};

// mean and rstd are those layer_norm returned for x. grad_residual (x's shape) or undefined: the
// gradient that reaches x by another path (add_layer_norm's sum), added to grad_x.
LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, const Shape& normalized_shape, bool with_bias = true,
                                   const Tensor& grad_residual = Tensor());

}  // namespace kiln::ops
