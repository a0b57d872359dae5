// CUDA layer norm forward and backward (layer_norm.cu), declared in
// core/kernels/layer_norm.inc (Note [Kernel interfaces]).
#pragma once

#include <cstdint>

#include <kiln/core/ops/layer_norm.h>

namespace kiln::cuda {
#include <kiln/core/kernels/layer_norm.inc>
}  // namespace kiln::cuda
