// softmax and its backward on the CPU (softmax.cpp), declared in core/kernels/softmax.inc (Note
// [Kernel interfaces]).
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::cpu {
#include <kiln/core/kernels/softmax.inc>
}  // namespace kiln::cpu
