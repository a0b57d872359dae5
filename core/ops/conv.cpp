// conv2d's front (argument checks, then cuDNN for CUDA tensors: core/cuda/kernels/conv.h) and its CPU
// kernels: im2col + Eigen GEMM, parallel over the batch (one column buffer per thread; inside
// that region Eigen stays single-threaded, see Note [GEMM threading] in matmul.cpp). The weight
// gradient sums images in fixed blocks combined in a fixed order, so no result depends on threads.
#include <kiln/core/ops/conv.h>

// GCC 12 reports false maybe-uninitialized warnings inside Eigen's AVX-512 intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop

#include <algorithm>
#include <vector>

#include <kiln/core/cuda/kernels/conv.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/ops/common.h>
#include <kiln/core/parallel.h>

namespace kiln::ops {

namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MatMap = Eigen::Map<RowMat<T>>;
template <class T>
using ConstMatMap = Eigen::Map<const RowMat<T>>;

constexpr int64_t kWeightGradBlocks = 16;  // images are summed in at most this many fixed blocks

// One image's convolution geometry.
struct Geometry {
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

Geometry make_geometry(const char* op, int64_t c, int64_t h, int64_t w, Size2 kernel, const Conv2dOptions& o) {
  KILN_CHECK(o.stride_.h >= 1 && o.stride_.w >= 1, op, ": stride must be positive, got ", o.stride_);
  KILN_CHECK(o.dilation_.h >= 1 && o.dilation_.w >= 1, op, ": dilation must be positive, got ", o.dilation_);
  KILN_CHECK(o.padding_.h >= 0 && o.padding_.w >= 0, op, ": padding must be non-negative, got ", o.padding_);
  KILN_CHECK(kernel.h >= 1 && kernel.w >= 1, op, ": kernel size must be positive, got ", kernel);
  Geometry g;
  g.c = c, g.h = h, g.w = w, g.kh = kernel.h, g.kw = kernel.w;
  g.sh = o.stride_.h, g.sw = o.stride_.w, g.ph = o.padding_.h, g.pw = o.padding_.w;
  g.dh = o.dilation_.h, g.dw = o.dilation_.w;
  const int64_t eh = g.dh * (g.kh - 1) + 1, ew = g.dw * (g.kw - 1) + 1;  // the dilated kernel's extent
  KILN_CHECK(h + 2 * g.ph >= eh && w + 2 * g.pw >= ew, op, ": kernel ", kernel, " with dilation ", o.dilation_,
             " spans (", eh, ", ", ew, "), larger than the padded input (", h + 2 * g.ph, ", ", w + 2 * g.pw,
             ")");
  g.oh = (h + 2 * g.ph - eh) / g.sh + 1;
  g.ow = (w + 2 * g.pw - ew) / g.sw + 1;
  return g;
}

// x (C, H, W) -> cols (C*kh*kw, OH*OW).
template <class T>
void im2col_kernel(const T* x, const Geometry& g, T* cols) {
  const int64_t plane = g.plane();
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = cols + ((c * g.kh + i) * g.kw + j) * plane;
        const T* xc = x + c * g.h * g.w;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          T* out = row + oy * g.ow;
          const int64_t iy = oy * g.sh - g.ph + i * g.dh;
          if (iy < 0 || iy >= g.h) {
            std::fill(out, out + g.ow, T(0));
            continue;
          }
          const T* xr = xc + iy * g.w;
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t ix = ox * g.sw - g.pw + j * g.dw;
            out[ox] = (ix >= 0 && ix < g.w) ? xr[ix] : T(0);
          }
        }
      }
}

// cols (C*kh*kw, OH*OW) summed into x (C, H, W), which the caller zeroed.
template <class T>
void col2im_kernel(const T* cols, const Geometry& g, T* x) {
  const int64_t plane = g.plane();
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = cols + ((c * g.kh + i) * g.kw + j) * plane;
        T* xc = x + c * g.h * g.w;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t iy = oy * g.sh - g.ph + i * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          T* xr = xc + iy * g.w;
          const T* in = row + oy * g.ow;
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t ix = ox * g.sw - g.pw + j * g.dw;
            if (ix >= 0 && ix < g.w) xr[ix] += in[ox];
          }
        }
      }
}

// The shapes of one convolution, checked.
struct ConvShapes {
  int64_t n = 0, o = 0, groups = 1;
  Geometry g;
  int64_t group_out() const { return o / groups; }                    // Og
  int64_t group_cols() const { return g.c / groups * g.kh * g.kw; }  // Kc = C/groups * kh * kw
};

ConvShapes conv_shapes(const char* op, const Shape& x, const Shape& w, const Conv2dOptions& o) {
  KILN_CHECK(x.ndim() == 4, op, ": expected input (N, C, H, W), got shape ", x);
  KILN_CHECK(w.ndim() == 4, op, ": expected weight (O, C/groups, kh, kw), got shape ", w);
  KILN_CHECK(o.groups_ >= 1, op, ": groups must be positive, got ", o.groups_);
  KILN_CHECK(x[1] % o.groups_ == 0, op, ": groups ", o.groups_, " does not divide the input's ", x[1],
             " channels (input ", x, ")");
  KILN_CHECK(w[0] % o.groups_ == 0, op, ": groups ", o.groups_, " does not divide the ", w[0],
             " output channels (weight ", w, ")");
  KILN_CHECK(w[1] * o.groups_ == x[1], op, ": input ", x, " has ", x[1], " channels but weight ", w, " expects ",
             w[1] * o.groups_, " (", w[1], " per group x ", o.groups_, " groups)");
  ConvShapes s;
  s.n = x[0], s.o = w[0], s.groups = o.groups_;
  s.g = make_geometry(op, x[1], x[2], x[3], Size2(w[2], w[3]), o);
  return s;
}

void check_floating(const char* op, const Tensor& t) {
  KILN_CHECK(is_floating(t.dtype()), op, ": expected a floating-point tensor (f32, f64, bf16, f16), got ",
             t.dtype(), " of shape ", t.shape());
}

DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

void check_grad_out(const char* op, const Tensor& grad_out, const ConvShapes& s) {
  const Shape expected{s.n, s.o, s.g.oh, s.g.ow};
  KILN_CHECK(grad_out.shape() == expected, op, ": grad_out has shape ", grad_out.shape(), ", expected ",
             expected);
}

// x (N, C, H, W), w (O, Kc), bias (O) or null -> y (N, O, OH, OW).
template <class T>
void conv_forward(const T* x, const T* w, const T* bias, T* y, const ConvShapes& s) {
  const Geometry& g = s.g;
  const int64_t plane = g.plane(), og = s.group_out(), kc = s.group_cols();
  Eigen::setNbThreads(num_threads());
  parallel_for(0, s.n, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> buffer(g.identity() ? 0 : g.col_rows() * plane);  // (C*kh*kw, OH*OW)
    for (int64_t n = lo; n < hi; ++n) {
      const T* xn = x + n * g.c * g.h * g.w;
      const T* cols = xn;
      if (!g.identity()) {
        im2col_kernel(xn, g, buffer.data());
        cols = buffer.data();
      }
      T* yn = y + n * s.o * plane;
      for (int64_t grp = 0; grp < s.groups; ++grp) {
        MatMap<T> out(yn + grp * og * plane, og, plane);
        out.noalias() = ConstMatMap<T>(w + grp * og * kc, og, kc) * ConstMatMap<T>(cols + grp * kc * plane, kc, plane);
      }
      if (bias)
        for (int64_t o = 0; o < s.o; ++o)
          for (int64_t p = 0; p < plane; ++p) yn[o * plane + p] += bias[o];
    }
  });
}

// gy (N, O, OH, OW), w (O, Kc) -> gx (N, C, H, W).
template <class T>
void conv_backward_input(const T* gy, const T* w, T* gx, const ConvShapes& s) {
  const Geometry& g = s.g;
  const int64_t plane = g.plane(), og = s.group_out(), kc = s.group_cols(), image = g.c * g.h * g.w;
  Eigen::setNbThreads(num_threads());
  parallel_for(0, s.n, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> buffer(g.identity() ? 0 : g.col_rows() * plane);  // (C*kh*kw, OH*OW)
    for (int64_t n = lo; n < hi; ++n) {
      T* gxn = gx + n * image;
      T* cols = g.identity() ? gxn : buffer.data();
      for (int64_t grp = 0; grp < s.groups; ++grp) {
        MatMap<T> c(cols + grp * kc * plane, kc, plane);
        c.noalias() = ConstMatMap<T>(w + grp * og * kc, og, kc).transpose() *
                      ConstMatMap<T>(gy + (n * s.o + grp * og) * plane, og, plane);
      }
      if (!g.identity()) {
        std::fill(gxn, gxn + image, T(0));
        col2im_kernel(cols, g, gxn);
      }
    }
  });
}

// gy (N, O, OH, OW), x (N, C, H, W) -> gw (O, Kc), summed over images in fixed blocks.
template <class T>
void conv_backward_weight(const T* gy, const T* x, T* gw, const ConvShapes& s) {
  const Geometry& g = s.g;
  const int64_t plane = g.plane(), og = s.group_out(), kc = s.group_cols(), wsize = s.o * kc;
  const int64_t blocks = std::max<int64_t>(1, std::min(s.n, kWeightGradBlocks));
  std::vector<T> partial(blocks * wsize, T(0));  // (blocks, O, Kc)
  Eigen::setNbThreads(num_threads());
  parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> buffer(g.identity() ? 0 : g.col_rows() * plane);  // (C*kh*kw, OH*OW)
    for (int64_t b = lo; b < hi; ++b) {
      T* acc = partial.data() + b * wsize;
      for (int64_t n = b * s.n / blocks; n < (b + 1) * s.n / blocks; ++n) {
        const T* xn = x + n * g.c * g.h * g.w;
        const T* cols = xn;
        if (!g.identity()) {
          im2col_kernel(xn, g, buffer.data());
          cols = buffer.data();
        }
        for (int64_t grp = 0; grp < s.groups; ++grp) {
          MatMap<T> a(acc + grp * og * kc, og, kc);
          a.noalias() += ConstMatMap<T>(gy + (n * s.o + grp * og) * plane, og, plane) *
                         ConstMatMap<T>(cols + grp * kc * plane, kc, plane).transpose();
        }
      }
    }
  });
  std::copy(partial.begin(), partial.begin() + wsize, gw);
  for (int64_t b = 1; b < blocks; ++b)
    for (int64_t i = 0; i < wsize; ++i) gw[i] += partial[b * wsize + i];
}

// Runs fn.template operator()<T>() with T = double for f64, float for the other floating dtypes.
template <class F>
void dispatch_compute(DType ct, F&& fn) {
  if (ct == DType::f64)
    fn.template operator()<double>();
  else
    fn.template operator()<float>();
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  const bool cuda = on_cuda("conv2d", {&x, &weight});
  check_floating("conv2d", x);
  KILN_CHECK(weight.dtype() == x.dtype(), "conv2d: weight dtype ", weight.dtype(), " differs from the input's ",
             x.dtype());
  const ConvShapes s = conv_shapes("conv2d", x.shape(), weight.shape(), options);
  if (bias.defined()) {
    on_cuda("conv2d", {&x, &bias});
    KILN_CHECK(bias.dim() == 1 && bias.shape()[0] == s.o, "conv2d: bias must have shape [", s.o, "], got ",
               bias.shape());
    KILN_CHECK(bias.dtype() == x.dtype(), "conv2d: bias dtype ", bias.dtype(), " differs from the input's ",
               x.dtype());
  }
  if constexpr (cuda::kBuilt)
    if (cuda) return cuda::conv2d(x, weight, bias, options);
  check_cpu("conv2d", {&x, &weight});
  const DType ct = compute_dtype(x.dtype());
  const Tensor xc = x.to(ct).contiguous(), wc = weight.to(ct).contiguous();
  const Tensor bc = bias.defined() ? bias.to(ct).contiguous() : Tensor();
  Tensor out = empty({s.n, s.o, s.g.oh, s.g.ow}, ct);
  dispatch_compute(ct, [&]<class T>() {
    conv_forward<T>(xc.data<T>(), wc.data<T>(), bc.defined() ? bc.data<T>() : nullptr, out.data<T>(), s);
  });
  return out.to(x.dtype());
}

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& input_shape,
                             const Conv2dOptions& options) {
  const bool cuda = on_cuda("conv2d_backward_input", {&grad_out, &weight});
  check_floating("conv2d_backward_input", grad_out);
  KILN_CHECK(weight.dtype() == grad_out.dtype(), "conv2d_backward_input: weight dtype ", weight.dtype(),
             " differs from grad_out's ", grad_out.dtype());
  const ConvShapes s = conv_shapes("conv2d_backward_input", input_shape, weight.shape(), options);
  check_grad_out("conv2d_backward_input", grad_out, s);
  if constexpr (cuda::kBuilt)
    if (cuda) return cuda::conv2d_backward_input(grad_out, weight, input_shape, options);
  check_cpu("conv2d_backward_input", {&grad_out, &weight});
  const DType ct = compute_dtype(grad_out.dtype());
  const Tensor gy = grad_out.to(ct).contiguous(), wc = weight.to(ct).contiguous();
  Tensor gx = empty(input_shape, ct);
  dispatch_compute(ct, [&]<class T>() { conv_backward_input<T>(gy.data<T>(), wc.data<T>(), gx.data<T>(), s); });
  return gx.to(grad_out.dtype());
}

Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                              const Conv2dOptions& options) {
  const bool cuda = on_cuda("conv2d_backward_weight", {&grad_out, &x});
  check_floating("conv2d_backward_weight", grad_out);
  KILN_CHECK(x.dtype() == grad_out.dtype(), "conv2d_backward_weight: input dtype ", x.dtype(),
             " differs from grad_out's ", grad_out.dtype());
  const ConvShapes s = conv_shapes("conv2d_backward_weight", x.shape(), weight_shape, options);
  check_grad_out("conv2d_backward_weight", grad_out, s);
  if constexpr (cuda::kBuilt)
    if (cuda) return cuda::conv2d_backward_weight(grad_out, x, weight_shape, options);
  check_cpu("conv2d_backward_weight", {&grad_out, &x});
  const DType ct = compute_dtype(grad_out.dtype());
  const Tensor gy = grad_out.to(ct).contiguous(), xc = x.to(ct).contiguous();
  Tensor gw = empty(weight_shape, ct);
  dispatch_compute(ct, [&]<class T>() { conv_backward_weight<T>(gy.data<T>(), xc.data<T>(), gw.data<T>(), s); });
  return gw.to(grad_out.dtype());
}

Tensor conv2d_backward_bias(const Tensor& grad_out) {
  const bool cuda = on_cuda("conv2d_backward_bias", {&grad_out});
  check_floating("conv2d_backward_bias", grad_out);
  KILN_CHECK(grad_out.dim() == 4, "conv2d_backward_bias: expected grad_out (N, O, OH, OW), got shape ",
             grad_out.shape());
  if constexpr (cuda::kBuilt)
    if (cuda) return cuda::conv2d_backward_bias(grad_out);
  check_cpu("conv2d_backward_bias", {&grad_out});
  const int64_t n = grad_out.shape()[0], o = grad_out.shape()[1];
  const int64_t plane = grad_out.shape()[2] * grad_out.shape()[3];
  const Tensor gy = grad_out.to(DType::f64).contiguous();  // summed in double, rounded once
  const double* p = gy.data<double>();                     // (N, O, OH*OW)
  Tensor out = empty({o}, DType::f64);
  double* q = out.data<double>();
  parallel_for(0, o, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, n * plane)), [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      double sum = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < plane; ++k) sum += p[(i * o + c) * plane + k];
      q[c] = sum;
    }
  });
  return out.to(grad_out.dtype());
}

Tensor im2col(const Tensor& x, Size2 kernel, const Conv2dOptions& options) {
  check_cpu("im2col", {&x});
  check_floating("im2col", x);
  KILN_CHECK(x.dim() == 3, "im2col: expected one image (C, H, W), got shape ", x.shape());
  const Geometry g = make_geometry("im2col", x.shape()[0], x.shape()[1], x.shape()[2], kernel, options);
  const DType ct = compute_dtype(x.dtype());
  const Tensor xc = x.to(ct).contiguous();
  Tensor cols = empty({g.col_rows(), g.plane()}, ct);
  dispatch_compute(ct, [&]<class T>() { im2col_kernel<T>(xc.data<T>(), g, cols.data<T>()); });
  return cols.to(x.dtype());
}

Tensor col2im(const Tensor& cols, const Shape& image_shape, Size2 kernel, const Conv2dOptions& options) {
  check_cpu("col2im", {&cols});
  check_floating("col2im", cols);
  KILN_CHECK(image_shape.ndim() == 3, "col2im: expected an image shape (C, H, W), got ", image_shape);
  const Geometry g = make_geometry("col2im", image_shape[0], image_shape[1], image_shape[2], kernel, options);
  const Shape expected{g.col_rows(), g.plane()};
  KILN_CHECK(cols.shape() == expected, "col2im: columns have shape ", cols.shape(), ", expected ", expected,
             " for image ", image_shape, " and kernel ", kernel);
  const DType ct = compute_dtype(cols.dtype());
  const Tensor cc = cols.to(ct).contiguous();
  Tensor x = empty(image_shape, ct);
  dispatch_compute(ct, [&]<class T>() {
    std::fill(x.data<T>(), x.data<T>() + x.numel(), T(0));
    col2im_kernel<T>(cc.data<T>(), g, x.data<T>());
  });
  return x.to(cols.dtype());
}

}  // namespace kiln::ops
