// Layer norm on the CPU: x viewed as (rows, n) with n = numel(normalized_shape); one row per task,
// statistics in double. The backward pass sums grad_weight / grad_bias over rows in fixed blocks
// combined in order, so results do not depend on the thread count (Note [Deterministic reductions],
// core/cpu/reduce.h).
#include <kiln/core/cpu/layer_norm.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <kiln/core/cpu/compute.h>
#include <kiln/core/cpu/reduce.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/parallel.h>

namespace kiln::cpu::KILN_CPU_CAP {  // Note [CPU capabilities]

namespace {

// A parameter as a contiguous vector of C (empty when undefined).
template <class C>
std::vector<C> param(const Tensor& p) {
  if (!p.defined()) return {};
  return p.to_vector<C>();
}

// sum of a[j] * b[j] in double, 8 interleaved lanes (a fixed order that vectorizes).
template <class C>
double dot(const C* __restrict__ a, const C* __restrict__ b, int64_t n) {
  double s[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) s[k] += double(a[j + k]) * double(b[j + k]);
  double t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; j < n; ++j) t += double(a[j]) * double(b[j]);
  return t;
}

}  // namespace

ops::LayerNormResult layer_norm(const Tensor& x, const Tensor& residual, int64_t n, const Tensor& weight,
                                const Tensor& bias, double eps) {
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  Tensor in = x.contiguous();
  Tensor res = residual.defined() ? residual.contiguous() : Tensor();  // x's dtype (the front casts it)
  ops::LayerNormResult r{empty(x.shape(), x.dtype()), empty({rows}, compute_dtype(x.dtype())),
                         empty({rows}, compute_dtype(x.dtype())),
                         res.defined() ? empty(x.shape(), x.dtype()) : Tensor()};
  dispatch_floating(x.dtype(), "layer_norm", [&]<class T>() {
    using C = acc_t<T>;
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const std::vector<C> w = param<C>(weight), b = param<C>(bias);
    const T* xp = in.data<T>();
    const T* yp_res = res.defined() ? res.data<T>() : nullptr;
    T* sp = res.defined() ? r.sum.data<T>() : nullptr;
    T* yp = r.out.data<T>();
    S* mp = r.mean.data<S>();
    S* rp = r.rstd.data<S>();
    parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t row = lo; row < hi; ++row) {
        const T* xr = xp + row * n;
        if (sp != nullptr) {  // Note [Fused residual add]: the row's sum, rounded as ops::add rounds it
          T* sr = sp + row * n;
          const T* rr = yp_res + row * n;
          for (int64_t j = 0; j < n; ++j) sr[j] = static_cast<T>(static_cast<C>(xr[j]) + static_cast<C>(rr[j]));
          xr = sr;
        }
        T* yr = yp + row * n;
        auto to_double = [](T v) { return static_cast<double>(static_cast<C>(v)); };
        const double mean = sum_run<double>(xr, n, to_double) / static_cast<double>(n);
        const double var = sum_run<double>(xr, n, [&](T v) {
                             double d = to_double(v) - mean;
                             return d * d;
                           }) / static_cast<double>(n);
        const double rstd = 1.0 / std::sqrt(var + eps);
        const C cm = static_cast<C>(mean), cr = static_cast<C>(rstd);
        for (int64_t j = 0; j < n; ++j) {
          C y = (static_cast<C>(xr[j]) - cm) * cr;
          if (!w.empty()) y *= w[j];
          if (!b.empty()) y += b[j];
          yr[j] = static_cast<T>(y);
        }
        mp[row] = static_cast<S>(mean);
        rp[row] = static_cast<S>(rstd);
      }
    });
  });
  return r;
}

ops::LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& grad_residual, const Tensor& x,
                                        const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                        const Shape& normalized_shape, bool with_bias) {
  const char* op = "layer_norm_backward";
  const int64_t n = shape_numel(normalized_shape);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  const std::vector<double> mv = mean.to_vector<double>(), rv = rstd.to_vector<double>();
  Tensor xc = x.contiguous(), gc = grad_out.contiguous();
  Tensor rc = grad_residual.defined() ? grad_residual.contiguous() : Tensor();  // x's dtype (the front casts it)
  ops::LayerNormGrads grads;
  grads.grad_x = empty(x.shape(), x.dtype());
  const bool want_w = weight.defined();
  if (want_w) grads.grad_weight = empty(normalized_shape, weight.dtype());
  if (with_bias) grads.grad_bias = empty(normalized_shape, weight.defined() ? weight.dtype() : x.dtype());

  // Rows go in blocks whose size depends only on the shape; each block sums its own partial
  // grad_weight / grad_bias, and the partials are added in block order.
  const int64_t block = std::max<int64_t>(16, (rows + 127) / 128);
  const int64_t blocks = (rows + block - 1) / block;
  std::vector<double> part_w(want_w ? static_cast<size_t>(blocks * n) : 0);
  std::vector<double> part_b(with_bias ? static_cast<size_t>(blocks * n) : 0);

  dispatch_floating(x.dtype(), op, [&]<class T>() {
    using C = acc_t<T>;
    const std::vector<C> w = param<C>(weight);
    const T* xp = xc.data<T>();
    const T* gp = gc.data<T>();
    const T* grp = rc.defined() ? rc.data<T>() : nullptr;
    T* gxp = grads.grad_x.data<T>();
    const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(block * n, 1));
    parallel_for(0, blocks, grain, [&](int64_t lo, int64_t hi) {
      std::vector<C> xhat(static_cast<size_t>(n)), gw(static_cast<size_t>(n));
      for (int64_t blk = lo; blk < hi; ++blk) {
        double* pw = want_w ? part_w.data() + blk * n : nullptr;
        double* pb = with_bias ? part_b.data() + blk * n : nullptr;
        if (pw) std::fill(pw, pw + n, 0.0);
        if (pb) std::fill(pb, pb + n, 0.0);
        for (int64_t row = blk * block; row < std::min(rows, (blk + 1) * block); ++row) {
          const T* xr = xp + row * n;
          const T* gr = gp + row * n;
          const C m = static_cast<C>(mv[row]), rs = static_cast<C>(rv[row]);
          for (int64_t j = 0; j < n; ++j) {
            C g = static_cast<C>(gr[j]);
            xhat[j] = (static_cast<C>(xr[j]) - m) * rs;
            gw[j] = w.empty() ? g : g * w[j];
          }
          // grad_x = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), the means in double.
          const C* gwp = gw.data();
          const C* xh = xhat.data();
          const double a = sum_run<double>(gwp, n, [](C v) { return double(v); }) / double(n);
          const double b = dot(gwp, xh, n) / double(n);
          const C ca = static_cast<C>(a), cb = static_cast<C>(b);
          T* gxr = gxp + row * n;
          for (int64_t j = 0; j < n; ++j) gxr[j] = static_cast<T>(rs * (gwp[j] - ca - xh[j] * cb));
          if (grp != nullptr) {  // the residual's gradient, added as ops::add would add it
            const T* rr = grp + row * n;
            for (int64_t j = 0; j < n; ++j) gxr[j] = static_cast<T>(static_cast<C>(gxr[j]) + static_cast<C>(rr[j]));
          }
          if (pw)
            for (int64_t j = 0; j < n; ++j) pw[j] += double(static_cast<C>(gr[j])) * double(xh[j]);
          if (pb)
            for (int64_t j = 0; j < n; ++j) pb[j] += double(static_cast<C>(gr[j]));
        }
      }
    });
  });

  auto combine = [&](const std::vector<double>& part, Tensor& out) {
    std::vector<double> total(static_cast<size_t>(n), 0.0);
    for (int64_t blk = 0; blk < blocks; ++blk)
      for (int64_t j = 0; j < n; ++j) total[j] += part[blk * n + j];
    out.copy_(from_vector<double>(total, out.shape()));
  };
  if (want_w) combine(part_w, grads.grad_weight);
  if (with_bias) combine(part_b, grads.grad_bias);
  return grads;
}

}  // namespace kiln::cpu::KILN_CPU_CAP
