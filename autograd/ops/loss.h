// Differentiable losses without a fused raw op (mse_loss), and the Reduction every loss takes
// (cross_entropy, on its fused raw ops, is in cross_entropy.h).
#pragma once

#include <kiln/core/tensor.h>

namespace kiln {

/// How a loss reduces its per-element values: none (keep them), mean, or sum (torch's reduction=).
enum class Reduction { none, mean, sum };

/// The squared differences of input and target (same shapes), reduced (torch's F.mse_loss).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

}  // namespace kiln
