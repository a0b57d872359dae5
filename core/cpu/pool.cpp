// Pooling on the CPU. Each (n, c) plane is independent: work is split over planes, and each
// plane's gradient is accumulated by one thread in a fixed order, so results never depend on the
// thread count. 16-bit values are summed in float and rounded once. The window index math is
// shared with the CUDA kernels (core/kernels/pool_index.h).
#include <kiln/core/cpu/pool.h>

#include <algorithm>
#if defined(__AVX512F__)
#include <immintrin.h>
// GCC 12 reports false maybe-uninitialized warnings inside its AVX-512 intrinsics (the masked
// builtins' unused pass-through operand), as it does inside Eigen's.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <atomic>
#include <cmath>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/parallel.h>

namespace kiln::cpu::KILN_CPU_CAP {  // Note [CPU capabilities]

namespace {

using pool_index::adaptive_end;
using pool_index::adaptive_start;
using pool_index::first_tap;
using pool_index::Planes;
using pool_index::planes_of;
using pool_index::with_plane;

// Runs fn(plane) for every plane in parallel, about `work` operations each.
template <class F>
void for_each_plane(int64_t count, int64_t work, F&& fn) {
  parallel_for(0, count, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, work)), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) fn(i);
  });
}

// A backward kernel: gx (planes, H, W) of input_shape from grad_out (planes, OH, OW), plane by plane;
// add(g, plane, acc) adds the plane's terms (g: grad_out's values) into acc (H*W, in acc_t), which
// is then rounded once into gx.
template <class Add>
Tensor accumulate_planes(const char* op, const Tensor& grad_out, const Shape& input_shape, int64_t work, Add add) {
  const Planes p = planes_of(input_shape);
  const Tensor gy = grad_out.contiguous();
  Tensor gx = empty(input_shape, grad_out.dtype());
  dispatch_floating(grad_out.dtype(), op, [&]<class T>() {
    using A = acc_t<T>;
    const T* g = gy.data<T>();
    T* out = gx.data<T>();
    const int64_t n_in = p.h * p.w;
    for_each_plane(p.count, work, [&](int64_t plane) {
      if constexpr (std::is_same_v<A, T>) {  // accumulate in place: no buffer, no copy
        std::span<T> acc(out + plane * n_in, static_cast<size_t>(n_in));
        std::fill(acc.begin(), acc.end(), T(0));
        add(g, plane, acc);
      } else {
        std::vector<A> acc(n_in, A(0));
        add(g, plane, acc);
        for (int64_t i = 0; i < n_in; ++i) out[plane * n_in + i] = static_cast<T>(acc[i]);
      }
    });
  });
  return gx;
}

// One output row of the 2x2 stride-2 max pool: out[ox] = max of r0[2ox], r0[2ox+1], r1[2ox], r1[2ox+1]
// and idx[ox] its index in the plane (row0 + 2ox, + 1 for the right column, + w for the lower
// row). The first maximum in window order wins, a NaN beats any number, a later NaN an earlier one
// (the general loop's rule). Selects on a 2-bit tap code, no branches: they mispredict on real data.
inline void max_pool2x2_row(const float* r0, const float* r1, int64_t ow, int64_t w, int64_t row0, float* out,
                            int64_t* idx) {
  int64_t ox = 0;
#if defined(__AVX512F__)
  // 16 outputs at a time: even/odd columns split by a permute, the taps chosen by compare masks.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2), three = _mm512_set1_epi32(3);
  const __m512i wv = _mm512_set1_epi32(static_cast<int32_t>(w));
  for (; ox + 16 <= ow; ox += 16) {
    const __m512 t0 = _mm512_loadu_ps(r0 + 2 * ox), t1 = _mm512_loadu_ps(r0 + 2 * ox + 16);
    const __m512 u0 = _mm512_loadu_ps(r1 + 2 * ox), u1 = _mm512_loadu_ps(r1 + 2 * ox + 16);
    const __m512 a = _mm512_permutex2var_ps(t0, even, t1), b = _mm512_permutex2var_ps(t0, odd, t1);
    const __m512 c = _mm512_permutex2var_ps(u0, even, u1), d = _mm512_permutex2var_ps(u0, odd, u1);
    __m512 best = a;
    __m512i tap = _mm512_setzero_si512();
    __mmask16 m = _mm512_cmp_ps_mask(b, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
    best = _mm512_mask_mov_ps(best, m, b);
    tap = _mm512_mask_mov_epi32(tap, m, one);
    m = _mm512_cmp_ps_mask(c, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
    best = _mm512_mask_mov_ps(best, m, c);
    tap = _mm512_mask_mov_epi32(tap, m, two);
    m = _mm512_cmp_ps_mask(d, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
    best = _mm512_mask_mov_ps(best, m, d);
    tap = _mm512_mask_mov_epi32(tap, m, three);
    _mm512_storeu_ps(out + ox, best);
    // offset within the row pair: 2*lane + (tap & 1) + (tap >> 1) * w (fits int32: checked by the caller)
    const __m512i off = _mm512_add_epi32(_mm512_add_epi32(even, _mm512_and_si512(tap, one)),
                                         _mm512_mullo_epi32(_mm512_srli_epi32(tap, 1), wv));
    const __m512i base = _mm512_set1_epi64(row0 + 2 * ox);
    _mm512_storeu_si512(idx + ox, _mm512_add_epi64(base, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(off))));
    _mm512_storeu_si512(idx + ox + 8, _mm512_add_epi64(base, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(off, 1))));
  }
#endif
  for (; ox < ow; ++ox) {
    const float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
    float best = a;
    int32_t tap = 0;
    const bool tb = (b > best) | (b != b);
    best = tb ? b : best;
    tap = tb ? 1 : tap;
    const bool tc = (c > best) | (c != c);
    best = tc ? c : best;
    tap = tc ? 2 : tap;
    const bool td = (d > best) | (d != d);
    best = td ? d : best;
    tap = td ? 3 : tap;
    out[ox] = best;
    idx[ox] = row0 + 2 * ox + (tap & 1) + (tap >> 1) * w;
  }
}

// The 2x2 stride-2 window without padding (the CIFAR CNN's pool), f32, one row at a time.
void max_pool2x2(const float* in, const Planes& p, const PoolWindow& win, float* out, int64_t* idx) {
  const int64_t h = p.h, w = p.w, oh = win.oh, ow = win.ow;
  for_each_plane(p.count, oh * ow * 4, [=](int64_t plane) {
    const float* xp = in + plane * h * w;
    for (int64_t oy = 0; oy < oh; ++oy)
      max_pool2x2_row(xp + 2 * oy * w, xp + (2 * oy + 1) * w, ow, w, 2 * oy * w, out + (plane * oh + oy) * ow,
                      idx + (plane * oh + oy) * ow);
  });
}

bool is_2x2_stride_2(const PoolWindow& w) {
  return w.kh == 2 && w.kw == 2 && w.sh == 2 && w.sw == 2 && w.ph == 0 && w.pw == 0 && w.dh == 1 && w.dw == 1;
}

}  // namespace

ops::MaxPool2dResult max_pool2d(const Tensor& x, const PoolWindow& win) {
  const Planes p = planes_of(x.shape());
  const Tensor xc = x.contiguous();
  ops::MaxPool2dResult r{empty(with_plane(x.shape(), win.oh, win.ow), x.dtype()),
                         empty(with_plane(x.shape(), win.oh, win.ow), DType::i64)};
  if (x.dtype() == DType::f32 && is_2x2_stride_2(win) && p.h * p.w < (int64_t{1} << 31)) {
    max_pool2x2(xc.data<float>(), p, win, r.out.data<float>(), r.indices.data<int64_t>());
    return r;
  }
  dispatch_floating(x.dtype(), "max_pool2d", [&]<class T>() {
    using A = acc_t<T>;
    const T* in = xc.data<T>();     // (planes, H, W)
    T* out = r.out.data<T>();       // (planes, OH, OW)
    int64_t* idx = r.indices.data<int64_t>();
    for_each_plane(p.count, win.oh * win.ow * win.kh * win.kw, [&](int64_t plane) {
      const T* xp = in + plane * p.h * p.w;
      for (int64_t oy = 0; oy < win.oh; ++oy)
        for (int64_t ox = 0; ox < win.ow; ++ox) {
          const int64_t ys = oy * win.sh - win.ph, xs = ox * win.sw - win.pw;
          const int64_t y1 = std::min(ys + (win.kh - 1) * win.dh + 1, p.h);
          const int64_t x1 = std::min(xs + (win.kw - 1) * win.dw + 1, p.w);
          const int64_t y0 = first_tap(ys, win.dh), x0 = first_tap(xs, win.dw);
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
  const Planes p = planes_of(input_shape), po = planes_of(grad_out.shape());
  const Tensor ic = indices.contiguous();
  const int64_t* id = ic.data<int64_t>();  // (planes, OH*OW)
  const int64_t n_in = p.h * p.w, n_out = po.h * po.w;
  std::atomic<int64_t> bad{-1};
  Tensor gx = accumulate_planes("max_pool2d_backward", grad_out, input_shape, n_in + n_out,
                                [&](const auto* g, int64_t plane, auto& acc) {
                                  using A = typename std::decay_t<decltype(acc)>::value_type;
                                  for (int64_t o = plane * n_out; o < (plane + 1) * n_out; ++o) {
                                    if (id[o] < 0 || id[o] >= n_in) {
                                      bad.store(id[o]);
                                      continue;
                                    }
                                    acc[id[o]] += static_cast<A>(g[o]);
                                  }
                                });
  KILN_CHECK_INDEX(bad.load() == -1, "max_pool2d_backward: index ", bad.load(), " is outside the input plane of ",
                   p.h, " x ", p.w);
  return gx;
}

Tensor avg_pool2d(const Tensor& x, const PoolWindow& win) {
  const Planes p = planes_of(x.shape());
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

Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, const PoolWindow& win) {
  const Planes p = planes_of(input_shape);
  return accumulate_planes("avg_pool2d_backward", grad_out, input_shape, win.oh * win.ow * win.kh * win.kw,
                           [&](const auto* g, int64_t plane, auto& acc) {
                             using A = typename std::decay_t<decltype(acc)>::value_type;
                             const A divisor = static_cast<A>(win.kh * win.kw);
                             for (int64_t oy = 0; oy < win.oh; ++oy)
                               for (int64_t ox = 0; ox < win.ow; ++ox) {
                                 const int64_t y0 = oy * win.sh - win.ph, x0 = ox * win.sw - win.pw;
                                 const A v = static_cast<A>(g[(plane * win.oh + oy) * win.ow + ox]) / divisor;
                                 for (int64_t iy = std::max<int64_t>(y0, 0); iy < std::min(y0 + win.kh, p.h); ++iy)
                                   for (int64_t ix = std::max<int64_t>(x0, 0); ix < std::min(x0 + win.kw, p.w); ++ix)
                                     acc[iy * p.w + ix] += v;
                               }
                           });
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size) {
  const Planes p = planes_of(x.shape());
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
  const Planes p = planes_of(input_shape);
  const int64_t oh = grad_out.shape()[grad_out.dim() - 2], ow = grad_out.shape()[grad_out.dim() - 1];
  return accumulate_planes("adaptive_avg_pool2d_backward", grad_out, input_shape, p.h * p.w + oh * ow,
                           [&](const auto* g, int64_t plane, auto& acc) {
                             using A = typename std::decay_t<decltype(acc)>::value_type;
                             for (int64_t oy = 0; oy < oh; ++oy)
                               for (int64_t ox = 0; ox < ow; ++ox) {
                                 const int64_t y0 = adaptive_start(oy, p.h, oh), y1 = adaptive_end(oy, p.h, oh);
                                 const int64_t x0 = adaptive_start(ox, p.w, ow), x1 = adaptive_end(ox, p.w, ow);
                                 const A v = static_cast<A>(g[(plane * oh + oy) * ow + ox]) /
                                             static_cast<A>((y1 - y0) * (x1 - x0));
                                 for (int64_t iy = y0; iy < y1; ++iy)
                                   for (int64_t ix = x0; ix < x1; ++ix) acc[iy * p.w + ix] += v;
                               }
                           });
}

}  // namespace kiln::cpu::KILN_CPU_CAP
