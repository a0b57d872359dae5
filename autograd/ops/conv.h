// Differentiable 2-D convolution (NCHW).
#pragma once

#include <kiln/core/tensor.h>
#include <kiln/core/window.h>

namespace kiln {

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& options = {});

}  // namespace kiln
