// Matrix products with torch semantics: matmul (dot, matrix-vector, GEMM, batched with batch-dim
// broadcasting), bmm, mm, linear and the fused linear + GELU. GEMM runs on strided views without
// copying when a matrix is row- or column-major: Eigen on the CPU, cuBLASLt on CUDA (where f32 may
// use TF32, see cuda::set_allow_tf32); f32/f64 natively, bf16/f16 computed in f32 and rounded once.
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

// GELU (tanh approximation, GPT-2's) of linear(x, weight, bias), keeping the pre-activation a
// backward pass needs: out = gelu_tanh(pre_gelu), pre_gelu = linear(x, weight, bias). On CUDA the
// GELU runs in cuBLASLt's epilogue when it can (out_features a multiple of 8, an aligned bias);
// otherwise, and on the CPU, it is linear followed by gelu_tanh.
struct LinearGelu {
  Tensor out;
  Tensor pre_gelu;
};
LinearGelu linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace kiln::ops
