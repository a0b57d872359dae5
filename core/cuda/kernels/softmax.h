// softmax and its backward on CUDA (softmax.cu), declared in core/kernels/softmax.inc (Note
// [Kernel interfaces]).
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::cuda {
#include <kiln/core/kernels/softmax.inc>
}  // namespace kiln::cuda
