// Pooling fronts (argument checks, then core/cuda/kernels/pool.h for CUDA tensors) and the CPU kernels.
// Each (n, c) plane is independent: work is split over planes, and each
// plane's gradient is accumulated by one thread in a fixed order, so results never depend on the
// thread count. 16-bit values are summed in float and rounded once.
#include <kiln/core/ops/pool.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include <kiln/core/cuda/kernels/pool.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/common.h>
#include <kiln/core/parallel.h>

namespace kiln::ops {

namespace {

// The planes of an (N, C, H, W) or (C, H, W) tensor.
struct Planes {
  int64_t count = 0, h = 0, w = 0;
};

Planes planes_of(const char* op, const Shape& s) {
  KILN_CHECK(s.ndim() == 3 || s.ndim() == 4, op, ": expected (N, C, H, W) or (C, H, W), got shape ", s);
  const int64_t h = s[s.ndim() - 2], w = s[s.ndim() - 1];
  return {h * w == 0 ? 0 : shape_numel(s) / (h * w), h, w};
}

Shape with_plane(const Shape& s, int64_t oh, int64_t ow) {
  Shape r = s;
  r[r.ndim() - 2] = oh;
  r[r.ndim() - 1] = ow;
  return r;
}

struct Window {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
};

Window make_window(const char* op, const Planes& p, Size2 kernel, std::optional<Size2> stride, Size2 padding,
                   Size2 dilation) {
  const Size2 s = stride.value_or(kernel);
  KILN_CHECK(kernel.h >= 1 && kernel.w >= 1, op, ": kernel size must be positive, got ", kernel);
  KILN_CHECK(s.h >= 1 && s.w >= 1, op, ": stride must be positive, got ", s);
  KILN_CHECK(dilation.h >= 1 && dilation.w >= 1, op, ": dilation must be positive, got ", dilation);
  KILN_CHECK(padding.h >= 0 && padding.w >= 0 && padding.h <= kernel.h / 2 && padding.w <= kernel.w / 2, op,
             ": padding ", padding, " must be non-negative and at most half the kernel ", kernel);
  Window w{kernel.h, kernel.w, s.h, s.w, padding.h, padding.w, dilation.h, dilation.w, 0, 0};
  const int64_t eh = w.dh * (w.kh - 1) + 1, ew = w.dw * (w.kw - 1) + 1;
  KILN_CHECK(p.h + 2 * w.ph >= eh && p.w + 2 * w.pw >= ew, op, ": kernel ", kernel, " (dilation ", dilation,
             ") is larger than the padded input (", p.h + 2 * w.ph, ", ", p.w + 2 * w.pw, ")");
  w.oh = (p.h + 2 * w.ph - eh) / w.sh + 1;
  w.ow = (p.w + 2 * w.pw - ew) / w.sw + 1;
  return w;
}

void check_floating(const char* op, const Tensor& t) {
  KILN_CHECK(is_floating(t.dtype()), op, ": expected a floating-point tensor (f32, f64, bf16, f16), got ",
             t.dtype(), " of shape ", t.shape());
}

void check_grad_out(const char* op, const Tensor& grad_out, const Shape& expected) {
  KILN_CHECK(grad_out.shape() == expected, op, ": grad_out has shape ", grad_out.shape(), ", expected ",
             expected);
}

cuda::PoolWindow cuda_window(const Window& w) {
  return {w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, w.dh, w.dw, w.oh, w.ow};
}

// Runs fn(plane) for every plane in parallel, about `work` operations each.
template <class F>
void for_each_plane(int64_t count, int64_t work, F&& fn) {
  parallel_for(0, count, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, work)), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) fn(i);
  });
}

// The adaptive window [start, end) of output cell i when `in` is pooled to `out`.
inline int64_t adaptive_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
inline int64_t adaptive_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

}  // namespace

MaxPool2dResult max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding,
                           Size2 dilation) {
  const bool cuda = on_cuda("max_pool2d", {&x});
  check_floating("max_pool2d", x);
  const Planes p = planes_of("max_pool2d", x.shape());
  const Window win = make_window("max_pool2d", p, kernel, stride, padding, dilation);
  if constexpr (cuda::kBuilt)
    if (cuda) return cuda::max_pool2d(x, cuda_window(win));
  check_cpu("max_pool2d", {&x});
  const Tensor xc = x.contiguous();
  MaxPool2dResult r{empty(with_plane(x.shape(), win.oh, win.ow), x.dtype()),
                    empty(with_plane(x.shape(), win.oh, win.ow), DType::i64)};
  dispatch_floating(x.dtype(), "max_pool2d", [&]<class T>() {
    using A = acc_t<T>;
    const T* in = xc.data<T>();     // (planes, H, W)
    T* out = r.out.data<T>();       // (planes, OH, OW)
    int64_t* idx = r.indices.data<int64_t>();
    for_each_plane(p.count, win.oh * win.ow * win.kh * win.kw, [&](int64_t plane) {
      const T* xp = in + plane * p.h * p.w;
      for (int64_t oy = 0; oy < win.oh; ++oy)
        for (int64_t ox = 0; ox < win.ow; ++ox) {
          int64_t y0 = oy * win.sh - win.ph, x0 = ox * win.sw - win.pw;
          const int64_t y1 = std::min(y0 + (win.kh - 1) * win.dh + 1, p.h);
          const int64_t x1 = std::min(x0 + (win.kw - 1) * win.dw + 1, p.w);
          while (y0 < 0) y0 += win.dh;
          while (x0 < 0) x0 += win.dw;
          int64_t best = y0 * p.w + x0;
          A best_value = -std::numeric_limits<A>::infinity();
          for (int64_t iy = y0; iy < y1; iy += win.dh)
            for (int64_t ix = x0; ix < x1; ix += win.dw) {
              const A v = static_cast<A>(xp[iy * p.w + ix]);
              if (v > best_value || std::isnan(v)) {  // NaN wins, as in torch
                best_value = v;
                best = iy * p.w + ix;
              }
            }
          const int64_t o = (plane * win.oh + oy) * win.ow + ox;
          out[o] = static_cast<T>(best_value);
          idx[o] = best;
        }
    });
  });
  return r;
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& input_shape) {
  const bool cuda = on_cuda("max_pool2d_backward", {&grad_out, &indices});
  check_floating("max_pool2d_backward", grad_out);
  KILN_CHECK(indices.dtype() == DType::i64, "max_pool2d_backward: indices must be i64, got ", indices.dtype());
  KILN_CHECK(indices.shape() == grad_out.shape(), "max_pool2d_backward: indices of shape ", indices.shape(),
             " do not match grad_out's ", grad_out.shape());
  const Planes p = planes_of("max_pool2d_backward", input_shape);
  const Planes po = planes_of("max_pool2d_backward", grad_out.shape());
  KILN_CHECK(grad_out.dim() == input_shape.ndim() && with_plane(input_shape, po.h, po.w) == grad_out.shape(),
             "max_pool2d_backward: grad_out ", grad_out.shape(), " does not pool the input shape ", input_shape);
  if constexpr (cuda::kBuilt)
    if (cuda) return cuda::max_pool2d_backward(grad_out, indices, input_shape);
  check_cpu("max_pool2d_backward", {&grad_out, &indices});
  const Tensor gy = grad_out.contiguous(), ic = indices.contiguous();
  Tensor gx = empty(input_shape, grad_out.dtype());
  std::atomic<int64_t> bad{-1};
  dispatch_floating(grad_out.dtype(), "max_pool2d_backward", [&]<class T>() {
    using A = acc_t<T>;
    const T* g = gy.data<T>();              // (planes, OH*OW)
    const int64_t* id = ic.data<int64_t>();  // (planes, OH*OW)
    T* out = gx.data<T>();                   // (planes, H*W)
    const int64_t n_in = p.h * p.w, n_out = po.h * po.w;
    for_each_plane(p.count, n_in + n_out, [&](int64_t plane) {
      std::vector<A> acc(n_in, A(0));
      for (int64_t o = plane * n_out; o < (plane + 1) * n_out; ++o) {
        if (id[o] < 0 || id[o] >= n_in) {
          bad.store(id[o]);
          continue;
        }
        acc[id[o]] += static_cast<A>(g[o]);
      }
      for (int64_t i = 0; i < n_in; ++i) out[plane * n_in + i] = static_cast<T>(acc[i]);
    });
  });
  KILN_CHECK_INDEX(bad.load() == -1, "max_pool2d_backward: index ", bad.load(), " is outside the input plane of ",
                   p.h, " x ", p.w);
  return gx;
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding) {
  const bool cuda = on_cuda("avg_pool2d", {&x});
  check_floating("avg_pool2d", x);
  const Planes p = planes_of("avg_pool2d", x.shape());
  const Window win = make_window("avg_pool2d", p, kernel, stride, padding, 1);
  if constexpr (cuda::kBuilt)
    if (cuda) return cuda::avg_pool2d(x, cuda_window(win));
  check_cpu("avg_pool2d", {&x});
  const Tensor xc = x.contiguous();
  Tensor out = empty(with_plane(x.shape(), win.oh, win.ow), x.dtype());
  dispatch_floating(x.dtype(), "avg_pool2d", [&]<class T>() {
    using A = acc_t<T>;
    const T* in = xc.data<T>();  // (planes, H, W)
    T* y = out.data<T>();        // (planes, OH, OW)
    const A divisor = static_cast<A>(win.kh * win.kw);  // padding counts (count_include_pad)
    for_each_plane(p.count, win.oh * win.ow * win.kh * win.kw, [&](int64_t plane) {
      const T* xp = in + plane * p.h * p.w;
      for (int64_t oy = 0; oy < win.oh; ++oy)
        for (int64_t ox = 0; ox < win.ow; ++ox) {
          const int64_t y0 = oy * win.sh - win.ph, x0 = ox * win.sw - win.pw;
          A sum = 0;
          for (int64_t iy = std::max<int64_t>(y0, 0); iy < std::min(y0 + win.kh, p.h); ++iy)
            for (int64_t ix = std::max<int64_t>(x0, 0); ix < std::min(x0 + win.kw, p.w); ++ix)
              sum += static_cast<A>(xp[iy * p.w + ix]);
          y[(plane * win.oh + oy) * win.ow + ox] = static_cast<T>(sum / divisor);
        }
    });
  });
  return out;
}

Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, Size2 kernel,
                           std::optional<Size2> stride, Size2 padding) {
  const bool cuda = on_cuda("avg_pool2d_backward", {&grad_out});
  check_floating("avg_pool2d_backward", grad_out);
  const Planes p = planes_of("avg_pool2d_backward", input_shape);
  const Window win = make_window("avg_pool2d_backward", p, kernel, stride, padding, 1);
  check_grad_out("avg_pool2d_backward", grad_out, with_plane(input_shape, win.oh, win.ow));
  if constexpr (cuda::kBuilt)
    if (cuda) return cuda::avg_pool2d_backward(grad_out, input_shape, cuda_window(win));
  check_cpu("avg_pool2d_backward", {&grad_out});
  const Tensor gy = grad_out.contiguous();
  Tensor gx = empty(input_shape, grad_out.dtype());
  dispatch_floating(grad_out.dtype(), "avg_pool2d_backward", [&]<class T>() {
    using A = acc_t<T>;
    const T* g = gy.data<T>();  // (planes, OH, OW)
    T* out = gx.data<T>();      // (planes, H, W)
    const A divisor = static_cast<A>(win.kh * win.kw);
    for_each_plane(p.count, win.oh * win.ow * win.kh * win.kw, [&](int64_t plane) {
      std::vector<A> acc(p.h * p.w, A(0));
      for (int64_t oy = 0; oy < win.oh; ++oy)
        for (int64_t ox = 0; ox < win.ow; ++ox) {
          const int64_t y0 = oy * win.sh - win.ph, x0 = ox * win.sw - win.pw;
          const A v = static_cast<A>(g[(plane * win.oh + oy) * win.ow + ox]) / divisor;
          for (int64_t iy = std::max<int64_t>(y0, 0); iy < std::min(y0 + win.kh, p.h); ++iy)
            for (int64_t ix = std::max<int64_t>(x0, 0); ix < std::min(x0 + win.kw, p.w); ++ix)
              acc[iy * p.w + ix] += v;
        }
      for (int64_t i = 0; i < p.h * p.w; ++i) out[plane * p.h * p.w + i] = static_cast<T>(acc[i]);
    });
  });
  return gx;
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size) {
  const bool cuda = on_cuda("adaptive_avg_pool2d", {&x});
  check_floating("adaptive_avg_pool2d", x);
  const Planes p = planes_of("adaptive_avg_pool2d", x.shape());
  KILN_CHECK(output_size.h >= 1 && output_size.w >= 1, "adaptive_avg_pool2d: output size must be positive, got ",
             output_size);
  KILN_CHECK(p.h >= 1 && p.w >= 1, "adaptive_avg_pool2d: input plane must be non-empty, got shape ", x.shape());
  if constexpr (cuda::kBuilt)
    if (cuda) return cuda::adaptive_avg_pool2d(x, output_size);
  check_cpu("adaptive_avg_pool2d", {&x});
  const int64_t oh = output_size.h, ow = output_size.w;
  const Tensor xc = x.contiguous();
  Tensor out = empty(with_plane(x.shape(), oh, ow), x.dtype());
  dispatch_floating(x.dtype(), "adaptive_avg_pool2d", [&]<class T>() {
    using A = acc_t<T>;
    const T* in = xc.data<T>();  // (planes, H, W)
    T* y = out.data<T>();        // (planes, OH, OW)
    for_each_plane(p.count, p.h * p.w + oh * ow, [&](int64_t plane) {
      const T* xp = in + plane * p.h * p.w;
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          const int64_t y0 = adaptive_start(oy, p.h, oh), y1 = adaptive_end(oy, p.h, oh);
          const int64_t x0 = adaptive_start(ox, p.w, ow), x1 = adaptive_end(ox, p.w, ow);
          A sum = 0;
          for (int64_t iy = y0; iy < y1; ++iy)
            for (int64_t ix = x0; ix < x1; ++ix) sum += static_cast<A>(xp[iy * p.w + ix]);
          y[(plane * oh + oy) * ow + ox] = static_cast<T>(sum / static_cast<A>((y1 - y0) * (x1 - x0)));
        }
    });
  });
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape) {
  const bool cuda = on_cuda("adaptive_avg_pool2d_backward", {&grad_out});
  check_floating("adaptive_avg_pool2d_backward", grad_out);
  const Planes p = planes_of("adaptive_avg_pool2d_backward", input_shape);
  KILN_CHECK(grad_out.dim() == input_shape.ndim(), "adaptive_avg_pool2d_backward: grad_out ", grad_out.shape(),
             " and input shape ", input_shape, " differ in rank");
  const int64_t oh = grad_out.shape()[grad_out.dim() - 2], ow = grad_out.shape()[grad_out.dim() - 1];
  check_grad_out("adaptive_avg_pool2d_backward", grad_out, with_plane(input_shape, oh, ow));
  KILN_CHECK(oh >= 1 && ow >= 1, "adaptive_avg_pool2d_backward: empty grad_out ", grad_out.shape());
  if constexpr (cuda::kBuilt)
    if (cuda) return cuda::adaptive_avg_pool2d_backward(grad_out, input_shape);
  check_cpu("adaptive_avg_pool2d_backward", {&grad_out});
  const Tensor gy = grad_out.contiguous();
  Tensor gx = empty(input_shape, grad_out.dtype());
  dispatch_floating(grad_out.dtype(), "adaptive_avg_pool2d_backward", [&]<class T>() {
    using A = acc_t<T>;
    const T* g = gy.data<T>();  // (planes, OH, OW)
    T* out = gx.data<T>();      // (planes, H, W)
    for_each_plane(p.count, p.h * p.w + oh * ow, [&](int64_t plane) {
      std::vector<A> acc(p.h * p.w, A(0));
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          const int64_t y0 = adaptive_start(oy, p.h, oh), y1 = adaptive_end(oy, p.h, oh);
          const int64_t x0 = adaptive_start(ox, p.w, ow), x1 = adaptive_end(ox, p.w, ow);
          const A v = static_cast<A>(g[(plane * oh + oy) * ow + ox]) / static_cast<A>((y1 - y0) * (x1 - x0));
          for (int64_t iy = y0; iy < y1; ++iy)
            for (int64_t ix = x0; ix < x1; ++ix) acc[iy * p.w + ix] += v;
        }
      for (int64_t i = 0; i < p.h * p.w; ++i) out[plane * p.h * p.w + i] = static_cast<T>(acc[i]);
    });
  });
  return gx;
}

}  // namespace kiln::ops
