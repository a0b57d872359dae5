// Helpers shared by the op fronts in core/ops: argument checks that give uniform messages.
#pragma once

#include <initializer_list>

#include <kiln/core/tensor.h>

namespace kiln::ops {

// Every tensor defined and on one device; the CPU has every kernel, CUDA gets them with the
// CUDA backend. Fails naming the op and the device.
void check_cpu(const char* op, std::initializer_list<const Tensor*> tensors);

// Whether the op runs on CUDA: then every tensor is defined and on one CUDA device (mixed
// devices fail naming both). Otherwise they must all be defined CPU tensors (check_cpu).
bool on_cuda(const char* op, std::initializer_list<const Tensor*> tensors);

// Checks two operands are on the same device.
void check_same_device(const char* op, const Tensor& a, const Tensor& b);

}  // namespace kiln::ops
