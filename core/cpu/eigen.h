// Eigen's Core for the CPU kernels that call its GEMM (matmul.cpp, conv.cpp), included once here
// with the one warning it needs silenced: GCC 12 reports false maybe-uninitialized warnings inside
// Eigen's AVX-512 intrinsics.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop
