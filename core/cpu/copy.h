// Dtype conversion and fill on the CPU: the loops behind Tensor::copy_ and fill_ (core/copy.cpp) for
// CPU tensors, the bf16/f16 casts among them.
#pragma once

#include <kiln/core/cpu/kernel_set.h>
#include <kiln/core/tensor.h>

namespace kiln::cpu {
KILN_CPU_DECLARE_KERNELS(
// dst = src converted to dst's dtype; src already has dst's shape (stride 0 where broadcast) and
// does not overlap it. Any dtypes and strides.
void copy(const Tensor& dst, const Tensor& src);

// Every element of t = value, converted once to t's compute type (Note [Conversion to u8]).
void fill(const Tensor& t, double value);
)
}  // namespace kiln::cpu
