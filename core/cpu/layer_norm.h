// Layer norm forward and backward on the CPU (layer_norm.cpp), declared in
// core/kernels/layer_norm.inc (Note [Kernel interfaces]).
#pragma once

#include <cstdint>

#include <kiln/core/ops/layer_norm.h>

#define KILN_CPU_KERNELS <kiln/core/kernels/layer_norm.inc>
#include <kiln/core/cpu/declare_kernels.h>
