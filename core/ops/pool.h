// 2-D pooling on CPU with torch semantics: max (with the argmax indices its backward needs), average
// (padding counted in the divisor, like torch's default count_include_pad) and adaptive average.
// Inputs are (N, C, H, W) or (C, H, W); floating dtypes; 16-bit sums are taken in float.
#pragma once

#include <optional>

#include <kiln/core/window.h>
#include <kiln/core/tensor.h>

namespace kiln::ops {

struct MaxPool2dResult {
  Tensor out;      // (N, C, OH, OW)
  Tensor indices;  // (N, C, OH, OW) i64: the argmax as a flat index iy * W + ix into its H*W plane
};

// stride defaults to the kernel; padding (implicit -inf) may be at most half the kernel. A NaN in a
// window is the window's max, as in torch.
MaxPool2dResult max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride = std::nullopt,
                           Size2 padding = 0, Size2 dilation = 1);
// Routes each grad_out element to its argmax; input_shape is the forward input's.
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& input_shape);

Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = 0);
Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, Size2 kernel,
                           std::optional<Size2> stride = std::nullopt, Size2 padding = 0);

// Output cell (i, j) averages input rows [floor(i*H/OH), ceil((i+1)*H/OH)) and likewise columns.
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape);

}  // namespace kiln::ops
