// GEMM on CUDA through cuBLASLt, declared in core/kernels/matmul.inc (Note [Kernel interfaces]):
// the products behind ops::matmul/bmm/mm/linear for CUDA tensors, with the bias and GELU epilogues
// fused (the TF32 switch is in kiln/cuda.h). No CUDA headers here (STYLE.md); the work is in
// matmul.cpp, see Note [cuBLASLt GEMM] there. gemm_gelu gives nullopt when cuBLASLt's epilogue
// cannot be used: N not a multiple of 8, a misaligned bias, or no algorithm for it (e.g. in f64).
#pragma once

#include <optional>

#include <kiln/core/ops/matmul.h>
#include <kiln/core/tensor.h>
#include <kiln/cuda.h>  // allow_tf32

namespace kiln::cuda {
#include <kiln/core/kernels/matmul.inc>
}  // namespace kiln::cuda
