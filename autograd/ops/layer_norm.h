// Differentiable layer norm.
#pragma once

#include <kiln/core/tensor.h>

namespace kiln {

/// Normalizes over the trailing `normalized_shape` dims; weight/bias may be undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace kiln
