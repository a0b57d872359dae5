// GEMM on the CPU with Eigen, or oneDNN's sgemm for f32 (the products behind core/ops/matmul.h for
// CPU tensors), declared in core/kernels/matmul.inc (Note [Kernel interfaces]). 16-bit operands are
// computed in f32 and rounded once. There is no fused GELU epilogue on the CPU: gemm_gelu is always
// nullopt, so the front composes linear and gelu_tanh. Threads are Kiln's own: Note [GEMM
// threading] in matmul.cpp.
#pragma once

#include <optional>

#include <kiln/core/ops/matmul.h>
#include <kiln/core/tensor.h>

#define KILN_CPU_KERNELS <kiln/core/kernels/matmul.inc>
#include <kiln/core/cpu/declare_kernels.h>
