// Differentiable matrix products (torch semantics, batch broadcasting; see kiln::ops::matmul).
#pragma once

#include <kiln/core/tensor.h>

namespace kiln {

///@{
/// torch.matmul (1-D to N-D operands, batch dimensions broadcast), torch.bmm (3-D) and torch.mm (2-D).
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);
///@}
/// x (..., in) @ weight (out, in)^T + bias (out) -> (..., out); bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace kiln
