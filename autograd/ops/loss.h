// Differentiable losses without a fused raw op (mse_loss), and the Reduction every loss takes
// (cross_entropy, on its fused raw ops, is in cross_entropy.h).
#pragma once

#include <kiln/core/tensor.h>

namespace kiln {

enum class Reduction { none, mean, sum };

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

}  // namespace kiln
