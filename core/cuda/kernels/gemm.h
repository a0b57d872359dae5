// GEMM on CUDA through cuBLASLt: the products behind ops::matmul/bmm/mm/linear for CUDA tensors,
// with the bias and GELU epilogues fused (the TF32 switch is in kiln/cuda.h). No CUDA headers here
// (STYLE.md); the work is in gemm.cpp. See Note [cuBLASLt GEMM] there.
#pragma once

#include <optional>

#include <kiln/core/tensor.h>
#include <kiln/cuda.h>  // allow_tf32

namespace kiln::cuda {

// a (batch_a..., M, K) @ b (batch_b..., K, N) (+ bias (N)) -> (batch..., M, N), a fresh contiguous
// tensor in the operands' dtype. `batch` is the broadcast of batch_a and batch_b (the front checked
// it, and that K matches). a, b and bias share one CUDA device and one floating dtype.
Tensor gemm(const Tensor& a, const Tensor& b, const Tensor& bias, const Shape& batch);

// The same product with the tanh GELU (GPT-2's) fused into cuBLASLt's epilogue:
// pre_gelu = a @ b (+ bias), out = gelu_tanh(pre_gelu), both (batch..., M, N). nullopt, with
// nothing launched, when the epilogue cannot be used (N not a multiple of 8, a misaligned bias, or
// no cuBLASLt algorithm for it, e.g. in f64); the caller then composes linear and gelu_tanh.
struct GemmGelu {
  Tensor out;
  Tensor pre_gelu;
};
std::optional<GemmGelu> gemm_gelu(const Tensor& a, const Tensor& b, const Tensor& bias, const Shape& batch);

}  // namespace kiln::cuda
