// 2-D convolution on the CPU: im2col + Eigen GEMM, parallel over the batch (one column buffer per
// thread; inside that region Eigen stays single-threaded, see Note [GEMM threading] in
// core/cpu/matmul.cpp). The weight gradient sums images in fixed blocks combined in a fixed order,
// so no result depends on the thread count.
#include <kiln/core/cpu/conv.h>

#include <algorithm>
#include <vector>

#include <kiln/core/cpu/compute.h>
#include <kiln/core/cpu/conv_winograd.h>
#include <kiln/core/cpu/eigen.h>
#include <kiln/core/cpu/onednn/switch.h>
#include <kiln/core/factory.h>
#include <kiln/core/parallel.h>
#if KILN_WITH_ONEDNN
#include <kiln/core/cpu/onednn/conv.h>
#endif

namespace kiln::cpu::KILN_CPU_CAP {  // Note [CPU capabilities]

namespace {

using Geometry = ConvGeometry;

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MatMap = Eigen::Map<RowMat<T>>;
template <class T>
using ConstMatMap = Eigen::Map<const RowMat<T>>;

constexpr int64_t kWeightGradBlocks = 16;  // images are summed in at most this many fixed blocks

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

// kernel(a, b, out) on a and b converted to their compute type (contiguous), out fresh of shape
// out_shape; the result rounded once to a's dtype.
template <class Kernel>
Tensor in_compute_dtype(const Tensor& a, const Tensor& b, const Shape& out_shape, Kernel kernel) {
  const DType ct = compute_dtype(a.dtype());
  const Tensor ac = a.to(ct).contiguous(), bc = b.to(ct).contiguous();
  Tensor out = empty(out_shape, ct);
  dispatch_compute(ct, [&]<class T>() { kernel.template operator()<T>(ac.data<T>(), bc.data<T>(), out.data<T>()); });
  return out.to(a.dtype());
}

}  // namespace

// Note [oneDNN convolutions]
// With onednn_enabled(), f32 and 16-bit convolutions run in oneDNN (core/cpu/onednn/conv.h) and f64
// stays here (oneDNN has no f64). oneDNN splits its work by thread count, so its results may differ
// in the last bits between thread counts (same count, same bits); the kernels below do not.
// Kiln's Winograd variant (Note [CPU Winograd]) goes first where it is switched on and takes the shape.
namespace {
#if KILN_WITH_ONEDNN
bool use_onednn(const Tensor& t) { return onednn_enabled() && t.dtype() != DType::f64; }
#endif
bool use_winograd(const Tensor& t, const ConvShapes& s) {
  return t.dtype() != DType::f64 && cpu_winograd_enabled() && winograd_eligible(s);
}
}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvShapes& s) {
  if (use_winograd(x, s)) return winograd_conv2d(x, weight, bias, s);
#if KILN_WITH_ONEDNN
  if (use_onednn(x))
    if (auto y = onednn::conv2d(x, weight, bias, s)) return *y;
#endif
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
                             const ConvShapes& s) {
  if (use_winograd(grad_out, s)) return winograd_conv2d_backward_input(grad_out, weight, input_shape, s);
#if KILN_WITH_ONEDNN
  if (use_onednn(grad_out))
    if (auto gx = onednn::conv2d_backward_input(grad_out, weight, input_shape, s)) return *gx;
#endif
  return in_compute_dtype(grad_out, weight, input_shape, [&]<class T>(const T* gy, const T* w, T* gx) {
    conv_backward_input<T>(gy, w, gx, s);
  });
}

Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                              const ConvShapes& s) {
  if (use_winograd(grad_out, s)) return winograd_conv2d_backward_weight(grad_out, x, weight_shape, s);
#if KILN_WITH_ONEDNN
  if (use_onednn(grad_out))
    if (auto gw = onednn::conv2d_backward_weight(grad_out, x, weight_shape, s)) return *gw;
#endif
  return in_compute_dtype(grad_out, x, weight_shape, [&]<class T>(const T* gy, const T* xp, T* gw) {
    conv_backward_weight<T>(gy, xp, gw, s);
  });
}

Tensor conv2d_backward_bias(const Tensor& grad_out) {
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

Tensor im2col(const Tensor& x, const Geometry& g) {
  const DType ct = compute_dtype(x.dtype());
  const Tensor xc = x.to(ct).contiguous();
  Tensor cols = empty({g.col_rows(), g.plane()}, ct);
  dispatch_compute(ct, [&]<class T>() { im2col_kernel<T>(xc.data<T>(), g, cols.data<T>()); });
  return cols.to(x.dtype());
}

Tensor col2im(const Tensor& cols, const Shape& image_shape, const Geometry& g) {
  const DType ct = compute_dtype(cols.dtype());
  const Tensor cc = cols.to(ct).contiguous();
  Tensor x = empty(image_shape, ct);
  dispatch_compute(ct, [&]<class T>() {
    std::fill(x.data<T>(), x.data<T>() + x.numel(), T(0));
    col2im_kernel<T>(cc.data<T>(), g, x.data<T>());
  });
  return x.to(cols.dtype());
}

}  // namespace kiln::cpu::KILN_CPU_CAP
