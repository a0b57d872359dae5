// Differentiable dropout with a seeded, reproducible mask.
#pragma once

#include <kiln/core/generator.h>
#include <kiln/core/tensor.h>

namespace kiln {

/// Zeroes each element with probability p and scales the rest by 1/(1-p) when training; the mask
/// comes from `gen` (seeded, reproducible). Identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);
Tensor dropout(const Tensor& x, double p, bool training);  ///< the default generator

}  // namespace kiln
