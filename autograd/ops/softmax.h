// Differentiable softmax and log_softmax.
#pragma once

#include <kiln/core/tensor.h>

namespace kiln {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace kiln
