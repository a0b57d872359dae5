// Helpers shared by the op fronts in core/ops: argument checks that give uniform messages.
#pragma once

#include <initializer_list>

#include <kiln/core/tensor.h>

namespace kiln::ops {

// Every tensor defined, inside its storage (check_in_storage) and on one device; the CPU has every
// kernel, CUDA gets them with the CUDA backend. Fails naming the op and the device.
void check_cpu(const char* op, std::initializer_list<const Tensor*> tensors);

// Whether the op runs on CUDA: then every tensor is defined, inside its storage and on one CUDA
// device (mixed devices fail naming both). Otherwise they must all be defined CPU tensors (check_cpu).
bool on_cuda(const char* op, std::initializer_list<const Tensor*> tensors);

// Checks two operands are on the same device.
void check_same_device(const char* op, const Tensor& a, const Tensor& b);

// Note [Reads within the storage]
// No kernel may read or write past a tensor's storage. A tensor keeps its shape when its storage is
// resized (Storage::resize: FSDP releases a unit's parameters to 0 bytes between uses), so each op
// checks every tensor operand once, at its entry: the bytes from the tensor's offset to its furthest
// element (O(dims), never per element) must lie inside the storage, and the storage must not be
// pending (Note [Storage release notes]). check_cpu and on_cuda do it for the operands they are given,
// so every dispatch line does (Note [One dispatch line]); the entries that read without them
// (Tensor::copy_ and fill_, so every copy, cast and transfer; printing, the random fills,
// save_safetensors, Gloo's collectives, attention's fused path) call check_in_storage themselves.
// The error names the op, the argument, its shape and what the storage holds, then the storage's
// release note: for FSDP, which parameter of which unit is not gathered and how to gather it.
void check_in_storage(const Tensor& t, const char* op, const char* arg);
void check_in_storage(const Tensor& t, const char* op, int arg);  // "argument <arg>", as check_cpu names them

}  // namespace kiln::ops
