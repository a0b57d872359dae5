// softmax / log_softmax along one dim and their backward on the CPU (the kernels behind
// core/ops/softmax.h for CPU tensors; the twin of core/cuda/kernels/softmax.h). dim is already
// wrapped and checked; inputs may have any layout.
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::cpu {

// log = true: log_softmax and its backward.
Tensor softmax(const Tensor& x, int64_t dim, bool log);
Tensor softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim, bool log);

}  // namespace kiln::cpu
