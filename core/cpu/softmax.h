// softmax and its backward on the CPU (softmax.cpp), declared in core/kernels/softmax.inc (Note
// [Kernel interfaces]).
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

#define KILN_CPU_KERNELS <kiln/core/kernels/softmax.inc>
#include <kiln/core/cpu/declare_kernels.h>
