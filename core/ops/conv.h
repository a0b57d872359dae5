// 2-D convolution (cross-correlation, like torch) on CPU: im2col + one GEMM per image and group,
// and the three backward kernels autograd needs. Floating dtypes; bf16/f16 are computed in f32 and
// rounded once. Outputs are fresh contiguous tensors.
#pragma once

#include <kiln/core/window.h>
#include <kiln/core/tensor.h>

namespace kiln::ops {

using kiln::Conv2dOptions;
using kiln::Size2;

// x (N, C, H, W), weight (O, C/groups, kh, kw), bias (O) or undefined -> (N, O, OH, OW) with
// OH = (H + 2*padding.h - dilation.h*(kh-1) - 1) / stride.h + 1 (likewise OW).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dOptions& options = {});

// Gradients of conv2d. grad_out is (N, O, OH, OW); the shapes say what the forward inputs were.
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& input_shape,
                             const Conv2dOptions& options = {});
Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                              const Conv2dOptions& options = {});
Tensor conv2d_backward_bias(const Tensor& grad_out);  // sum over N, OH, OW -> (O)

// One image x (C, H, W) -> columns (C*kh*kw, OH*OW): row (c*kh + i)*kw + j holds the input pixel
// that kernel tap (i, j) of channel c sees at each output position (0 in the padding).
// options.groups_ is ignored.
Tensor im2col(const Tensor& x, Size2 kernel, const Conv2dOptions& options = {});
// The adjoint of im2col: columns (C*kh*kw, OH*OW) summed back into an image of shape (C, H, W).
Tensor col2im(const Tensor& cols, const Shape& image_shape, Size2 kernel, const Conv2dOptions& options = {});

}  // namespace kiln::ops
