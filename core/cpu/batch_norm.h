// Batch norm forward and backward on the CPU (batch_norm.cpp), declared in
// core/kernels/batch_norm.inc (Note [Kernel interfaces]).
#pragma once

#include <array>

#include <kiln/core/ops/batch_norm.h>

#define KILN_CPU_KERNELS <kiln/core/kernels/batch_norm.inc>
#include <kiln/core/cpu/declare_kernels.h>
