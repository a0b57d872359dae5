// Kiln's own Winograd F(2x2, 3x3) convolutions on the CPU (Note [CPU Winograd] in
// conv_winograd.cpp): the variant of core/cpu/conv.cpp's kernels, chosen by cpu_winograd_enabled()
// (core/cpu/onednn/switch.h), for wide 3x3 stride-1 layers where oneDNN has only direct kernels.
#pragma once

#include <kiln/core/cpu/conv.h>

namespace kiln::cpu {

// Layers the variant takes: 3x3, stride 1, no dilation, one group, padding at most 2 (the
// backward-data pass is a convolution with padding 2 - p), and at least kWinogradMinChannels input
// and output channels (with fewer, the transforms cost more than the multiplications they save).
constexpr int64_t kWinogradMinChannels = 64;

inline bool winograd_eligible(const ConvShapes& s) {
  const ConvGeometry& g = s.g;
  return s.groups == 1 && g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 &&
         g.ph <= 2 && g.pw <= 2 && g.c >= kWinogradMinChannels && s.o >= kWinogradMinChannels;
}

KILN_CPU_DECLARE_KERNELS(

// The three passes of an eligible convolution (winograd_eligible), computed in f32 and rounded once
// to the inputs' dtype (f32, bf16, f16); the arguments are those of conv.h's kernels.
Tensor winograd_conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvShapes& shapes);
Tensor winograd_conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& input_shape,
                                      const ConvShapes& shapes);
Tensor winograd_conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                                       const ConvShapes& shapes);
)

}  // namespace kiln::cpu
