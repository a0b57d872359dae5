// Batch norm forward and backward on the CPU (batch_norm.cpp), declared in
// core/kernels/batch_norm.inc (Note [Kernel interfaces]).
#pragma once

#include <array>

#include <kiln/core/ops/batch_norm.h>

namespace kiln::cpu {
#include <kiln/core/kernels/batch_norm.inc>
}  // namespace kiln::cpu
