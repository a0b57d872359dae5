// The residual add and the layer norm after it as one differentiable op (Note [Fused residual
// add] in core/ops/layer_norm.h, in the source tree): a pre-LN block's `y = x + sublayer(..); h = ln(y)` in
// one pass forward and one backward, where the sum's gradient joins the layer norm's in the same pass.
#pragma once

#include <kiln/core/shape.h>
#include <kiln/core/tensor.h>

namespace kiln {

/// The two results of add_layer_norm: the residual sum (the next block's residual) and its layer norm.
struct AddLayerNormOutput {
  Tensor sum;  ///< x + residual (their promoted dtype)
  Tensor out;  ///< layer_norm(sum) (f32 under autocast, as layer_norm)
};

/// Equal to {x + residual, layer_norm(x + residual, normalized_shape, weight, bias, eps)} in values
/// and gradients (bitwise on the CPU); under autocast with a 16-bit sum it is that composition.
AddLayerNormOutput add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                                  const Tensor& weight, const Tensor& bias, double eps = 1e-5);

}  // namespace kiln
