// Pooling fronts: argument checks and the window, then the kernels of the input's backend
// (core/cpu/pool.cpp, core/cuda/kernels/pool.cu) through one dispatch line (Note [One dispatch
// line]). Devices are checked first (on_cuda).
#include <kiln/core/ops/pool.h>

#include <kiln/core/cpu/pool.h>
#include <kiln/core/cuda/kernels/pool.h>
#include <kiln/core/ops/backend.h>

namespace kiln::ops {

namespace {

using cpu::PoolWindow;
using pool_index::Planes;
using pool_index::with_plane;

Planes planes_of(const char* op, const Shape& s) {
  KILN_CHECK_VALUE(s.ndim() == 3 || s.ndim() == 4, op, ": expected (N, C, H, W) or (C, H, W), got shape ", s);
  return pool_index::planes_of(s);
}

PoolWindow make_window(const char* op, const Planes& p, Size2 kernel, std::optional<Size2> stride, Size2 padding,
                   Size2 dilation) {
  const Size2 s = stride.value_or(kernel);
  KILN_CHECK_VALUE(kernel.h >= 1 && kernel.w >= 1, op, ": kernel size must be positive, got ", kernel);
  KILN_CHECK_VALUE(s.h >= 1 && s.w >= 1, op, ": stride must be positive, got ", s);
  KILN_CHECK_VALUE(dilation.h >= 1 && dilation.w >= 1, op, ": dilation must be positive, got ", dilation);
  KILN_CHECK_VALUE(padding.h >= 0 && padding.w >= 0 && padding.h <= kernel.h / 2 && padding.w <= kernel.w / 2, op,
                   ": padding ", padding, " must be non-negative and at most half the kernel ", kernel);
  PoolWindow w{kernel.h, kernel.w, s.h, s.w, padding.h, padding.w, dilation.h, dilation.w, 0, 0};
  const int64_t eh = w.dh * (w.kh - 1) + 1, ew = w.dw * (w.kw - 1) + 1;
  KILN_CHECK_VALUE(p.h + 2 * w.ph >= eh && p.w + 2 * w.pw >= ew, op, ": kernel ", kernel, " (dilation ", dilation,
                   ") is larger than the padded input (", p.h + 2 * w.ph, ", ", p.w + 2 * w.pw, ")");
  w.oh = (p.h + 2 * w.ph - eh) / w.sh + 1;
  w.ow = (p.w + 2 * w.pw - ew) / w.sw + 1;
  return w;
}

void check_floating(const char* op, const Tensor& t) {
  KILN_CHECK_VALUE(is_floating(t.dtype()), op, ": expected a floating-point tensor (f32, f64, bf16, f16), got ",
                   t.dtype(), " of shape ", t.shape());
}

void check_grad_out(const char* op, const Tensor& grad_out, const Shape& expected) {
  KILN_CHECK_VALUE(grad_out.shape() == expected, op, ": grad_out has shape ", grad_out.shape(), ", expected ",
                   expected);
}

}  // namespace

MaxPool2dResult max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding,
                           Size2 dilation) {
  on_cuda("max_pool2d", {&x});
  check_floating("max_pool2d", x);
  const Planes p = planes_of("max_pool2d", x.shape());
  const PoolWindow win = make_window("max_pool2d", p, kernel, stride, padding, dilation);
  return dispatch_device("max_pool2d", x.device(), [&] { return cuda::max_pool2d(x, win); }, [&] { return KILN_CPU_KERNEL(max_pool2d)(x, win); });
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& input_shape) {
  on_cuda("max_pool2d_backward", {&grad_out, &indices});
  check_floating("max_pool2d_backward", grad_out);
  KILN_CHECK_VALUE(indices.dtype() == DType::i64, "max_pool2d_backward: indices must be i64, got ", indices.dtype());
  KILN_CHECK_VALUE(indices.shape() == grad_out.shape(), "max_pool2d_backward: indices of shape ", indices.shape(),
                   " do not match grad_out's ", grad_out.shape());
  planes_of("max_pool2d_backward", input_shape);  // checks its rank
  const Planes po = planes_of("max_pool2d_backward", grad_out.shape());
  KILN_CHECK_VALUE(grad_out.dim() == input_shape.ndim() && with_plane(input_shape, po.h, po.w) == grad_out.shape(),
                   "max_pool2d_backward: grad_out ", grad_out.shape(), " does not pool the input shape ", input_shape);
  return dispatch_device("max_pool2d_backward", grad_out.device(), [&] { return cuda::max_pool2d_backward(grad_out, indices, input_shape); },
                         [&] { return KILN_CPU_KERNEL(max_pool2d_backward)(grad_out, indices, input_shape); });
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding) {
  on_cuda("avg_pool2d", {&x});
  check_floating("avg_pool2d", x);
  const Planes p = planes_of("avg_pool2d", x.shape());
  const PoolWindow win = make_window("avg_pool2d", p, kernel, stride, padding, 1);
  return dispatch_device("avg_pool2d", x.device(), [&] { return cuda::avg_pool2d(x, win); }, [&] { return KILN_CPU_KERNEL(avg_pool2d)(x, win); });
}

Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, Size2 kernel,
                           std::optional<Size2> stride, Size2 padding) {
  on_cuda("avg_pool2d_backward", {&grad_out});
  check_floating("avg_pool2d_backward", grad_out);
  const Planes p = planes_of("avg_pool2d_backward", input_shape);
  const PoolWindow win = make_window("avg_pool2d_backward", p, kernel, stride, padding, 1);
  check_grad_out("avg_pool2d_backward", grad_out, with_plane(input_shape, win.oh, win.ow));
  return dispatch_device("avg_pool2d_backward", grad_out.device(), [&] { return cuda::avg_pool2d_backward(grad_out, input_shape, win); },
                         [&] { return KILN_CPU_KERNEL(avg_pool2d_backward)(grad_out, input_shape, win); });
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size) {
  on_cuda("adaptive_avg_pool2d", {&x});
  check_floating("adaptive_avg_pool2d", x);
  const Planes p = planes_of("adaptive_avg_pool2d", x.shape());
  KILN_CHECK_VALUE(output_size.h >= 1 && output_size.w >= 1, "adaptive_avg_pool2d: output size must be positive, got ",
                   output_size);
  KILN_CHECK_VALUE(p.h >= 1 && p.w >= 1, "adaptive_avg_pool2d: input plane must be non-empty, got shape ", x.shape());
  return dispatch_device("adaptive_avg_pool2d", x.device(), [&] { return cuda::adaptive_avg_pool2d(x, output_size); },
                         [&] { return KILN_CPU_KERNEL(adaptive_avg_pool2d)(x, output_size); });
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape) {
  on_cuda("adaptive_avg_pool2d_backward", {&grad_out});
  check_floating("adaptive_avg_pool2d_backward", grad_out);
  planes_of("adaptive_avg_pool2d_backward", input_shape);  // checks its rank
  KILN_CHECK_VALUE(grad_out.dim() == input_shape.ndim(), "adaptive_avg_pool2d_backward: grad_out ", grad_out.shape(),
                   " and input shape ", input_shape, " differ in rank");
  const int64_t oh = grad_out.shape()[grad_out.dim() - 2], ow = grad_out.shape()[grad_out.dim() - 1];
  check_grad_out("adaptive_avg_pool2d_backward", grad_out, with_plane(input_shape, oh, ow));
  KILN_CHECK_VALUE(oh >= 1 && ow >= 1, "adaptive_avg_pool2d_backward: empty grad_out ", grad_out.shape());
  return dispatch_device("adaptive_avg_pool2d_backward", grad_out.device(), [&] { return cuda::adaptive_avg_pool2d_backward(grad_out, input_shape); },
                         [&] { return KILN_CPU_KERNEL(adaptive_avg_pool2d_backward)(grad_out, input_shape); });
}

}  // namespace kiln::ops
