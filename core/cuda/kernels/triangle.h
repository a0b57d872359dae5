// triu/tril on CUDA (triangle.cu; no CUDA headers here), declared in
// core/kernels/triangle.inc (Note [Kernel interfaces]).
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::cuda {
#include <kiln/core/kernels/triangle.inc>
}  // namespace kiln::cuda
