// Differentiable scaled dot-product attention.
#pragma once

#include <kiln/core/tensor.h>

namespace kiln {

/// q, k, v (B, H, T, D) -> (B, H, T, D): softmax(q k^T / sqrt(D) [+ causal mask]) v.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true);

}  // namespace kiln
