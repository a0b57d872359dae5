// Checking macros for CUDA, cuBLAS(Lt) and cuDNN calls: the call is evaluated once and a failure
// throws kiln::Error naming the call, the error string and file:line. Include only from CUDA code.
#pragma once

#include <cuda_runtime.h>

#include <kiln/core/error.h>

#define KILN_CUDA_CHECK(expr)                                                                    \
  do {                                                                                           \
    cudaError_t kiln_err_ = (expr);                                                              \
    KILN_CHECK(kiln_err_ == cudaSuccess, "CUDA error ", static_cast<int>(kiln_err_), " (",      \
               cudaGetErrorString(kiln_err_), ") in ", #expr);                                   \
  } while (0)

// After every kernel launch.
#define KILN_CUDA_CHECK_LAUNCH() KILN_CUDA_CHECK(cudaGetLastError())

namespace kiln::cuda {

// The answer of cudaStreamQuery / cudaEventQuery as "done": false for cudaErrorNotReady (cleared,
// so that it does not surface at the next check), true for success; any other error throws.
inline bool query_done(cudaError_t err) {
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  KILN_CUDA_CHECK(err);
  return true;
}

}  // namespace kiln::cuda
