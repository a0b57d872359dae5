// 2-D convolution forward, backward-data and backward-weights through oneDNN (the fast path of
// core/cpu/conv.cpp's kernels when onednn_enabled()). Computed in f32 (16-bit inputs converted and
// the result rounded once); nullopt when oneDNN has no implementation for the shape, and the caller
// runs the plain im2col kernel. Outputs are fresh, contiguous tensors in the input's dtype.
#pragma once

#include <optional>

#include <kiln/core/cpu/conv.h>

namespace kiln::cpu::onednn {

std::optional<Tensor> conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvShapes& shapes);
std::optional<Tensor> conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& input_shape,
                                            const ConvShapes& shapes);
std::optional<Tensor> conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                                             const ConvShapes& shapes);

}  // namespace kiln::cpu::onednn
