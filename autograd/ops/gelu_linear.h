// linear(gelu(h), weight, bias) that keeps only the pre-activation h for the backward and
// recomputes gelu(h) there: an MLP's 4C-wide GELU output is never held between forward and
// backward (GPT's c_proj; issue #39).
#pragma once

#include <kiln/autograd/ops/elementwise.h>
#include <kiln/core/tensor.h>

namespace kiln {

/// h (..., in), weight (out, in), bias (out) or undefined -> (..., out). Bitwise equal to
/// linear(gelu(h, approximate), weight, bias) in value and gradients, under autocast too (GELU in
/// h's dtype, the product in the low dtype, as the two ops give); the backward pays one more GELU
/// pass over h instead of keeping gelu(h).
Tensor gelu_linear(const Tensor& h, const Tensor& weight, const Tensor& bias = Tensor(),
                   GeluApproximate approximate = GeluApproximate::tanh);

}  // namespace kiln
