// triu/tril on the CPU (triangle.cpp), declared in
// core/kernels/triangle.inc (Note [Kernel interfaces]).
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

#define KILN_CPU_KERNELS <kiln/core/kernels/triangle.inc>
#include <kiln/core/cpu/declare_kernels.h>
