// Layer norm forward and backward on the CPU (layer_norm.cpp), declared in
// core/kernels/layer_norm.inc (Note [Kernel interfaces]).
#pragma once

#include <cstdint>

#include <kiln/core/ops/layer_norm.h>

namespace kiln::cpu {
#include <kiln/core/kernels/layer_norm.inc>
}  // namespace kiln::cpu
