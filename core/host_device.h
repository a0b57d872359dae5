// KILN_HOST_DEVICE marks small functions that both the CPU code and CUDA kernels call (Philox,
// strided index math, the formulas in core/formulas.h, core/cuda/plan/): __host__ __device__ under
// nvcc, nothing in a plain C++ compile. KILN_UNROLL asks nvcc to unroll the loop that follows.
#pragma once

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#define KILN_UNROLL _Pragma("unroll")
#else
#define KILN_HOST_DEVICE
#define KILN_UNROLL
#endif
