// Matrix products with torch semantics: matmul (dot, matrix-vector, GEMM, batched with batch-dim
// broadcasting), bmm, mm and linear. GEMM runs through Eigen on strided views without copying when
// a matrix is row- or column-major; f32/f64 natively, bf16/f16 computed in f32 and rounded once.
#pragma once

#include <kiln/core/tensor.h>

namespace kiln::ops {

// torch.matmul: 1-D x 1-D is a dot product (0-dim result); a 1-D operand is promoted to a matrix
// (a row on the left, a column on the right) and the added dim removed from the result; N-D
// operands are stacks of matrices whose batch dims broadcast. Both operands share one floating dtype.
Tensor matmul(const Tensor& a, const Tensor& b);

// (B, M, K) x (B, K, N) -> (B, M, N); no broadcasting.
Tensor bmm(const Tensor& a, const Tensor& b);

// (M, K) x (K, N) -> (M, N).
Tensor mm(const Tensor& a, const Tensor& b);

// x (..., in) @ weight^T + bias: weight is (out, in), bias (out) or undefined. Result (..., out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace kiln::ops
