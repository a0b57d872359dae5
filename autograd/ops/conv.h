// Differentiable 2-D convolution (NCHW).
#pragma once

#include <kiln/core/tensor.h>
#include <kiln/core/window.h>

namespace kiln {

/// x (N, C_in, H, W), weight (C_out, C_in / groups, kH, kW), bias (C_out) or undefined -> (N, C_out,
/// H_out, W_out), as torch's F.conv2d with the options' stride, padding, dilation and groups.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& options = {});

}  // namespace kiln
