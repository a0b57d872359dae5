// 2-D convolution on the CPU (the kernels behind core/ops/conv.h for CPU tensors; the twin of
// core/cuda/kernels/conv.h): im2col + Eigen GEMM. The front checks the arguments and computes the
// geometry (ConvShapes) these take; inputs may have any layout, outputs are fresh and contiguous.
#pragma once

#include <cstdint>

#include <kiln/core/cpu/kernel_set.h>
#include <kiln/core/tensor.h>

namespace kiln::cpu {

// One image's convolution geometry.
struct ConvGeometry {
  int64_t c = 0, h = 0, w = 0;    // input (C, H, W)
  int64_t kh = 0, kw = 0;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t oh = 0, ow = 0;         // output plane
  int64_t plane() const { return oh * ow; }
  int64_t col_rows() const { return c * kh * kw; }
  bool identity() const {  // a 1x1 kernel that reads every pixel once: the columns are the image
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0;
  }
};

// The shapes of one convolution (the front checks them).
struct ConvShapes {
  int64_t n = 0, o = 0, groups = 1;
  ConvGeometry g;
  int64_t group_out() const { return o / groups; }                    // Og
  int64_t group_cols() const { return g.c / groups * g.kh * g.kw; }  // Kc = C/groups * kh * kw
};

KILN_CPU_DECLARE_KERNELS(

// conv2d and its backward kernels; bf16/f16 are computed in f32 and rounded once.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvShapes& shapes);
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& input_shape,
                             const ConvShapes& shapes);
Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                              const ConvShapes& shapes);
Tensor conv2d_backward_bias(const Tensor& grad_out);

// One image (C, H, W) to its columns (C*kh*kw, OH*OW), and the adjoint (ops::im2col, ops::col2im).
Tensor im2col(const Tensor& x, const ConvGeometry& g);
Tensor col2im(const Tensor& cols, const Shape& image_shape, const ConvGeometry& g);
)

}  // namespace kiln::cpu
