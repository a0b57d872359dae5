// KILN_HOST_DEVICE marks small functions that both the CPU code and CUDA kernels call (Philox,
// strided index math): __host__ __device__ under nvcc, nothing in a plain C++ compile.
#pragma once

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif
