// KILN_CUDNN_CHECK: the cuDNN counterpart of KILN_CUDA_CHECK (core/cuda/runtime/check.cuh). The call is
// evaluated once; a failure throws kiln::Error naming the call, cuDNN's status and file:line.
// CUDA-only (includes <cudnn.h>), hence .cuh: the installed package carries only *.h headers.
#pragma once

#include <cudnn.h>

#include <kiln/core/error.h>

#define KILN_CUDNN_CHECK(expr)                                                                   \
  do {                                                                                           \
    cudnnStatus_t kiln_status_ = (expr);                                                         \
    KILN_CHECK(kiln_status_ == CUDNN_STATUS_SUCCESS, "cuDNN error ", static_cast<int>(kiln_status_), \
               " (", cudnnGetErrorString(kiln_status_), ") in ", #expr);                          \
  } while (0)
