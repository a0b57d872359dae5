// Batch norm on the CPU: per-channel sums in double, taken row by row in parallel and combined in
// a fixed order, so no result depends on the thread count. The CUDA kernels use the same formulas
// (core/cuda/kernels/batch_norm.h, Note [Batch norm gradient]).
#include <kiln/core/cpu/batch_norm.h>

#include <cmath>
#include <vector>

#include <kiln/core/cpu/compute.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/parallel.h>

namespace kiln::cpu::KILN_CPU_CAP {  // Note [CPU capabilities]

namespace {

// x as (N, C, inner): `inner` is the product of the dims after the channel dim.
struct Layout {
  int64_t n = 0, channels = 0, inner = 1;
  int64_t count() const { return n * inner; }  // values per channel
};

Layout layout_of(const Tensor& x) {
  Layout l;
  l.n = x.size(0);
  l.channels = x.size(1);
  for (int64_t d = 2; d < x.dim(); ++d) l.inner *= x.size(d);
  return l;
}

// t in dtype dt, contiguous; an undefined tensor stays undefined.
Tensor as_compute(const Tensor& t, DType dt) { return t.defined() ? t.to(dt).contiguous() : Tensor(); }

template <class T>
double as_double(T v) {
  return static_cast<double>(static_cast<acc_t<T>>(v));
}

// Per-channel sums of two terms: fn(k, c, a, b) adds element k's terms to a and b. Each row
// (n, c) of (N, C, inner), `inner` contiguous elements, is summed by one task (rows in parallel)
// in kLanes interleaved partial sums (element k into lane k % kLanes, so the loop vectorizes instead
// of waiting on one chain of double adds), the lanes then added in order; the row sums are added
// per channel in n order. Fixed order: no thread-count dependence.
constexpr int64_t kLanes = 8;

template <class F>
void channel_sums(const Layout& l, std::vector<double>& sum_a, std::vector<double>& sum_b, F&& fn) {
  const int64_t rows = l.n * l.channels;
  std::vector<double> row_a(rows), row_b(rows);
  parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, l.inner)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t c = r % l.channels, end = (r + 1) * l.inner;
      double lane_a[kLanes] = {}, lane_b[kLanes] = {};
      int64_t k = r * l.inner;
      for (; k + kLanes <= end; k += kLanes)
        for (int64_t j = 0; j < kLanes; ++j) fn(k + j, c, lane_a[j], lane_b[j]);
      double a = 0, b = 0;
      for (int64_t j = 0; j < kLanes; ++j) a += lane_a[j], b += lane_b[j];
      for (; k < end; ++k) fn(k, c, a, b);
      row_a[r] = a;
      row_b[r] = b;
    }
  });
  sum_a.assign(l.channels, 0.0);
  sum_b.assign(l.channels, 0.0);
  for (int64_t n = 0; n < l.n; ++n)
    for (int64_t c = 0; c < l.channels; ++c) {
      sum_a[c] += row_a[n * l.channels + c];
      sum_b[c] += row_b[n * l.channels + c];
    }
}

// fn(row, c) for every row n * C + c of (N, C, inner), in parallel.
template <class F>
void for_each_row(const Layout& l, F&& fn) {
  parallel_for(0, l.n * l.channels, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, l.inner)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) fn(r, r % l.channels);
               });
}

// running = (1 - momentum) * running + momentum * stat, in place in running's dtype and strides.
void update_running(const Tensor& running, const std::vector<double>& stat, double momentum) {
  const Tensor old = running.to(DType::f64).contiguous();
  Tensor updated = empty({static_cast<int64_t>(stat.size())}, DType::f64);
  for (size_t c = 0; c < stat.size(); ++c)
    updated.data<double>()[c] = (1.0 - momentum) * old.data<double>()[c] + momentum * stat[c];
  Tensor r = running;  // a handle aliasing the caller's buffer
  r.copy_(updated);
}

}  // namespace

ops::BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                                const Tensor& running_var, bool training, double momentum, double eps) {
  const Layout l = layout_of(x);
  const DType ct = compute_dtype(x.dtype());
  const int64_t channels = l.channels, m = l.count();
  const Tensor xc = x.contiguous(), wc = as_compute(weight, ct), bc = as_compute(bias, ct);
  std::vector<double> mean(channels), var(channels);  // var: biased
  if (training) {
    dispatch_floating(x.dtype(), "batch_norm", [&]<class T>() {
      const T* p = xc.data<T>();  // (N, C, inner)
      std::vector<double> sum, unused;
      channel_sums(l, sum, unused, [&](int64_t k, int64_t, double& a, double&) { a += as_double(p[k]); });
      for (int64_t c = 0; c < channels; ++c) mean[c] = sum[c] / static_cast<double>(m);
      channel_sums(l, var, unused, [&](int64_t k, int64_t c, double& a, double&) {
        const double d = as_double(p[k]) - mean[c];
        a += d * d;
      });
      for (int64_t c = 0; c < channels; ++c) var[c] /= static_cast<double>(m);
    });
  } else {
    const Tensor rm = running_mean.to(DType::f64).contiguous(), rv = running_var.to(DType::f64).contiguous();
    for (int64_t c = 0; c < channels; ++c) mean[c] = rm.data<double>()[c], var[c] = rv.data<double>()[c];
  }

  ops::BatchNormResult r{empty(x.shape(), x.dtype()), empty({channels}, ct), empty({channels}, ct)};
  dispatch_compute(ct, [&]<class A>() {
    A* mu = r.mean.data<A>();
    A* is = r.invstd.data<A>();
    for (int64_t c = 0; c < channels; ++c) {
      mu[c] = static_cast<A>(mean[c]);
      is[c] = static_cast<A>(1.0 / std::sqrt(var[c] + eps));
    }
    const A* w = wc.defined() ? wc.data<A>() : nullptr;
    const A* b = bc.defined() ? bc.data<A>() : nullptr;
    dispatch_floating(x.dtype(), "batch_norm", [&]<class T>() {
      const T* in = xc.data<T>();  // (N, C, inner)
      T* out = r.out.data<T>();
      for_each_row(l, [&](int64_t row, int64_t c) {
        for (int64_t i = row * l.inner; i < (row + 1) * l.inner; ++i) {
          A v = (static_cast<A>(static_cast<acc_t<T>>(in[i])) - mu[c]) * is[c];
          if (w) v = v * w[c];
          if (b) v = v + b[c];
          out[i] = static_cast<T>(v);
        }
      });
    });
  });

  if (training && running_mean.defined()) {
    std::vector<double> unbiased(channels);
    for (int64_t c = 0; c < channels; ++c) unbiased[c] = var[c] * static_cast<double>(m) / static_cast<double>(m - 1);
    update_running(running_mean, mean, momentum);
    update_running(running_var, unbiased, momentum);
  }
  return r;
}

ops::BatchNormGrads batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                        const Tensor& mean, const Tensor& invstd, bool training,
                                        std::array<bool, 3> needs) {
  const Layout l = layout_of(x);
  const DType ct = compute_dtype(x.dtype());
  const int64_t channels = l.channels, m = l.count();
  const Tensor gy = grad_out.to(x.dtype()).contiguous(), xc = x.contiguous();
  const Tensor mc = as_compute(mean, ct), ic = as_compute(invstd, ct), wc = as_compute(weight, ct);
  std::vector<double> sum_dy(channels, 0.0), sum_dy_xhat(channels, 0.0);
  const bool sums = needs[1] || needs[2] || (training && needs[0]);
  ops::BatchNormGrads g;
  dispatch_compute(ct, [&]<class A>() {
    const A* mu = mc.data<A>();
    const A* is = ic.data<A>();
    const A* w = wc.defined() ? wc.data<A>() : nullptr;
    dispatch_floating(x.dtype(), "batch_norm_backward", [&]<class T>() {
      const T* dy = gy.data<T>();  // (N, C, inner)
      const T* in = xc.data<T>();
      if (sums)
        channel_sums(l, sum_dy, sum_dy_xhat, [&](int64_t k, int64_t c, double& s1, double& s2) {
          const double d = as_double(dy[k]);
          s1 += d;
          s2 += d * ((as_double(in[k]) - static_cast<double>(mu[c])) * static_cast<double>(is[c]));
        });
      if (!needs[0]) return;
      // dx = k * (dy - a - x_hat * b) when training, k * dy in eval (Note [Batch norm gradient]).
      std::vector<A> k(channels), a(channels), b(channels);
      for (int64_t c = 0; c < channels; ++c) {
        k[c] = static_cast<A>((w ? static_cast<double>(w[c]) : 1.0) * static_cast<double>(is[c]));
        a[c] = static_cast<A>(m > 0 ? sum_dy[c] / static_cast<double>(m) : 0.0);
        b[c] = static_cast<A>(m > 0 ? sum_dy_xhat[c] / static_cast<double>(m) : 0.0);
      }
      g.input = empty(x.shape(), x.dtype());
      T* dx = g.input.data<T>();
      for_each_row(l, [&](int64_t row, int64_t c) {
        for (int64_t i = row * l.inner; i < (row + 1) * l.inner; ++i) {
          const A d = static_cast<A>(static_cast<acc_t<T>>(dy[i]));
          if (training) {
            const A xhat = (static_cast<A>(static_cast<acc_t<T>>(in[i])) - mu[c]) * is[c];
            dx[i] = static_cast<T>(k[c] * (d - a[c] - xhat * b[c]));
          } else {
            dx[i] = static_cast<T>(k[c] * d);
          }
        }
      });
    });
    if (needs[1]) {
      g.weight = empty({channels}, ct);
      for (int64_t c = 0; c < channels; ++c) g.weight.data<A>()[c] = static_cast<A>(sum_dy_xhat[c]);
    }
    if (needs[2]) {
      g.bias = empty({channels}, ct);
      for (int64_t c = 0; c < channels; ++c) g.bias.data<A>()[c] = static_cast<A>(sum_dy[c]);
    }
  });
  return g;
}

}  // namespace kiln::cpu::KILN_CPU_CAP
