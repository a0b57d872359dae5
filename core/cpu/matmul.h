// GEMM on the CPU with Eigen (the products behind core/ops/matmul.h for CPU tensors; the twin of
// core/cuda/kernels/gemm.h). Threads are Kiln's own: Note [GEMM threading] in matmul.cpp.
#pragma once

#include <optional>

#include <kiln/core/cuda/kernels/gemm.h>
#include <kiln/core/tensor.h>

namespace kiln::cpu {

// a (batch_a..., M, K) @ b (batch_b..., K, N) (+ bias (N)) -> (batch..., M, N), a fresh contiguous
// tensor in the operands' dtype (16-bit computed in f32, rounded once). `batch` is the broadcast of
// batch_a and batch_b, checked by the front.
Tensor gemm(const Tensor& a, const Tensor& b, const Tensor& bias, const Shape& batch);

// No fused GELU epilogue on the CPU: always nullopt, so the front composes linear and gelu_tanh.
inline std::optional<cuda::GemmGelu> gemm_gelu(const Tensor&, const Tensor&, const Tensor&, const Shape&) {
  return std::nullopt;
}

}  // namespace kiln::cpu
