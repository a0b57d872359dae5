// Indexing kernels on the CPU (index.cpp), declared in core/kernels/index.inc (Note [Kernel
// interfaces]). Every kernel reads its indices first and returns its fault record at once (a CPU
// tensor); on a fault nothing is written, and the front throws its message.
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

#define KILN_CPU_KERNELS <kiln/core/kernels/index.inc>
#include <kiln/core/cpu/declare_kernels.h>
