// 2-D pooling on the CPU (pool.cpp), declared in core/kernels/pool.inc (Note [Kernel interfaces]).
// max_pool2d_backward fails (an index error) on an index outside the input plane.
#pragma once

#include <kiln/core/kernels/pool_index.h>
#include <kiln/core/ops/pool.h>

namespace kiln::cpu {
using PoolWindow = ::kiln::pool_index::Window;  // also declared in each set by pool.inc
}  // namespace kiln::cpu

#define KILN_CPU_KERNELS <kiln/core/kernels/pool.inc>
#include <kiln/core/cpu/declare_kernels.h>
