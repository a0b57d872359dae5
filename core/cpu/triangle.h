// triu/tril on the CPU (triangle.cpp), declared in
// core/kernels/triangle.inc (Note [Kernel interfaces]).
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::cpu {
#include <kiln/core/kernels/triangle.inc>
}  // namespace kiln::cpu
