// Differentiable softmax and log_softmax.
#pragma once

#include <kiln/core/tensor.h>

namespace kiln {

///@{
/// softmax and log_softmax along `dim` (torch.softmax, torch.log_softmax).
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
///@}

}  // namespace kiln
