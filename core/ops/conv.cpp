// conv2d's fronts: argument checks and the convolution's geometry, then the kernels of the
// operands' backend (core/cpu/conv.cpp: im2col + Eigen GEMM; core/cuda/kernels/conv.cpp: cuDNN)
// through one dispatch line (Note [One dispatch line]). Devices are checked first (on_cuda).
#include <kiln/core/ops/conv.h>

#include <kiln/core/cpu/conv.h>
#include <kiln/core/cuda/kernels/conv.h>
#include <kiln/core/ops/backend.h>

namespace kiln::ops {

namespace {

using cpu::ConvGeometry;
using cpu::ConvShapes;

ConvGeometry make_geometry(const char* op, int64_t c, int64_t h, int64_t w, Size2 kernel, const Conv2dOptions& o) {
  KILN_CHECK_VALUE(o.stride_.h >= 1 && o.stride_.w >= 1, op, ": stride must be positive, got ", o.stride_);
  KILN_CHECK_VALUE(o.dilation_.h >= 1 && o.dilation_.w >= 1, op, ": dilation must be positive, got ", o.dilation_);
  KILN_CHECK_VALUE(o.padding_.h >= 0 && o.padding_.w >= 0, op, ": padding must be non-negative, got ", o.padding_);
  KILN_CHECK_VALUE(kernel.h >= 1 && kernel.w >= 1, op, ": kernel size must be positive, got ", kernel);
  ConvGeometry g;
  g.c = c, g.h = h, g.w = w, g.kh = kernel.h, g.kw = kernel.w;
  g.sh = o.stride_.h, g.sw = o.stride_.w, g.ph = o.padding_.h, g.pw = o.padding_.w;
  g.dh = o.dilation_.h, g.dw = o.dilation_.w;
  const int64_t eh = g.dh * (g.kh - 1) + 1, ew = g.dw * (g.kw - 1) + 1;  // the dilated kernel's extent
  KILN_CHECK_VALUE(h + 2 * g.ph >= eh && w + 2 * g.pw >= ew, op, ": kernel ", kernel, " with dilation ", o.dilation_,
                   " spans (", eh, ", ", ew, "), larger than the padded input (", h + 2 * g.ph, ", ", w + 2 * g.pw,
                   ")");
  g.oh = (h + 2 * g.ph - eh) / g.sh + 1;
  g.ow = (w + 2 * g.pw - ew) / g.sw + 1;
  return g;
}

ConvShapes conv_shapes(const char* op, const Shape& x, const Shape& w, const Conv2dOptions& o) {
  KILN_CHECK_VALUE(x.ndim() == 4, op, ": expected input (N, C, H, W), got shape ", x);
  KILN_CHECK_VALUE(w.ndim() == 4, op, ": expected weight (O, C/groups, kh, kw), got shape ", w);
  KILN_CHECK_VALUE(o.groups_ >= 1, op, ": groups must be positive, got ", o.groups_);
  KILN_CHECK_VALUE(x[1] % o.groups_ == 0, op, ": groups ", o.groups_, " does not divide the input's ", x[1],
                   " channels (input ", x, ")");
  KILN_CHECK_VALUE(w[0] % o.groups_ == 0, op, ": groups ", o.groups_, " does not divide the ", w[0],
                   " output channels (weight ", w, ")");
  KILN_CHECK_VALUE(w[1] * o.groups_ == x[1], op, ": input ", x, " has ", x[1], " channels but weight ", w, " expects ",
                   w[1] * o.groups_, " (", w[1], " per group x ", o.groups_, " groups)");
  ConvShapes s;
  s.n = x[0], s.o = w[0], s.groups = o.groups_;
  s.g = make_geometry(op, x[1], x[2], x[3], Size2(w[2], w[3]), o);
  return s;
}

void check_floating(const char* op, const Tensor& t) {
  KILN_CHECK_VALUE(is_floating(t.dtype()), op, ": expected a floating-point tensor (f32, f64, bf16, f16), got ",
                   t.dtype(), " of shape ", t.shape());
}

// The checks of both backward convolutions: devices, a floating grad_out, `other` (the weight or
// the input, named `what`) of grad_out's dtype, and grad_out's shape; returns the shapes.
ConvShapes check_backward(const char* op, const Tensor& grad_out, const Tensor& other, const char* what,
                          const Shape& input_shape, const Shape& weight_shape, const Conv2dOptions& options) {
  on_cuda(op, {&grad_out, &other});
  check_floating(op, grad_out);
  KILN_CHECK_VALUE(other.dtype() == grad_out.dtype(), op, ": ", what, " dtype ", other.dtype(), " differs from grad_out's ",
                   grad_out.dtype());
  const ConvShapes s = conv_shapes(op, input_shape, weight_shape, options);
  const Shape expected{s.n, s.o, s.g.oh, s.g.ow};
  KILN_CHECK_VALUE(grad_out.shape() == expected, op, ": grad_out has shape ", grad_out.shape(), ", expected ",
                   expected);
  return s;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  on_cuda("conv2d", {&x, &weight});
  check_floating("conv2d", x);
  KILN_CHECK_VALUE(weight.dtype() == x.dtype(), "conv2d: weight dtype ", weight.dtype(), " differs from the input's ",
                   x.dtype());
  const ConvShapes s = conv_shapes("conv2d", x.shape(), weight.shape(), options);
  if (bias.defined()) {
    on_cuda("conv2d", {&x, &bias});
    KILN_CHECK_VALUE(bias.dim() == 1 && bias.shape()[0] == s.o, "conv2d: bias must have shape [", s.o, "], got ",
                     bias.shape());
    KILN_CHECK_VALUE(bias.dtype() == x.dtype(), "conv2d: bias dtype ", bias.dtype(), " differs from the input's ",
                     x.dtype());
  }
  return dispatch_device("conv2d", x.device(), [&] { return cuda::conv2d(x, weight, bias, options); },
                         [&] { return KILN_CPU_KERNEL(conv2d)(x, weight, bias, s); });
}

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& input_shape,
                             const Conv2dOptions& options) {
  const ConvShapes s =
      check_backward("conv2d_backward_input", grad_out, weight, "weight", input_shape, weight.shape(), options);
  return dispatch_device("conv2d_backward_input", grad_out.device(),
                         [&] { return cuda::conv2d_backward_input(grad_out, weight, input_shape, options); },
                         [&] { return KILN_CPU_KERNEL(conv2d_backward_input)(grad_out, weight, input_shape, s); });
}

Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                              const Conv2dOptions& options) {
  const ConvShapes s =
      check_backward("conv2d_backward_weight", grad_out, x, "input", x.shape(), weight_shape, options);
  return dispatch_device("conv2d_backward_weight", grad_out.device(),
                         [&] { return cuda::conv2d_backward_weight(grad_out, x, weight_shape, options); },
                         [&] { return KILN_CPU_KERNEL(conv2d_backward_weight)(grad_out, x, weight_shape, s); });
}

Tensor conv2d_backward_bias(const Tensor& grad_out) {
  on_cuda("conv2d_backward_bias", {&grad_out});
  check_floating("conv2d_backward_bias", grad_out);
  KILN_CHECK_VALUE(grad_out.dim() == 4, "conv2d_backward_bias: expected grad_out (N, O, OH, OW), got shape ",
                   grad_out.shape());
  return dispatch_device("conv2d_backward_bias", grad_out.device(), [&] { return cuda::conv2d_backward_bias(grad_out); },
                         [&] { return KILN_CPU_KERNEL(conv2d_backward_bias)(grad_out); });
}

Tensor im2col(const Tensor& x, Size2 kernel, const Conv2dOptions& options) {
  check_cpu("im2col", {&x});
  check_floating("im2col", x);
  KILN_CHECK_VALUE(x.dim() == 3, "im2col: expected one image (C, H, W), got shape ", x.shape());
  const ConvGeometry g = make_geometry("im2col", x.shape()[0], x.shape()[1], x.shape()[2], kernel, options);
  return KILN_CPU_KERNEL(im2col)(x, g);  // CPU only
}

Tensor col2im(const Tensor& cols, const Shape& image_shape, Size2 kernel, const Conv2dOptions& options) {
  check_cpu("col2im", {&cols});
  check_floating("col2im", cols);
  KILN_CHECK_VALUE(image_shape.ndim() == 3, "col2im: expected an image shape (C, H, W), got ", image_shape);
  const ConvGeometry g = make_geometry("col2im", image_shape[0], image_shape[1], image_shape[2], kernel, options);
  const Shape expected{g.col_rows(), g.plane()};
  KILN_CHECK_VALUE(cols.shape() == expected, "col2im: columns have shape ", cols.shape(), ", expected ", expected,
                   " for image ", image_shape, " and kernel ", kernel);
  return KILN_CPU_KERNEL(col2im)(cols, image_shape, g);  // CPU only
}

}  // namespace kiln::ops
