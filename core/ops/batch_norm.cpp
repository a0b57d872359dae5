// batch_norm's fronts (argument checks, then core/cuda/kernels/batch_norm.h for CUDA tensors) and its CPU
// kernels: per-channel sums in double, taken row by row in parallel and combined in a fixed order,
// so no result depends on the thread count. The CUDA kernels use the same formulas (batch_norm.h).
#include <kiln/core/ops/batch_norm.h>

#include <cmath>
#include <vector>

#include <kiln/core/cuda/kernels/batch_norm.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/common.h>
#include <kiln/core/parallel.h>

namespace kiln::ops {

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

void check_input(const char* op, const Tensor& x) {
  KILN_CHECK(x.defined(), op, ": the input is an undefined tensor");
  KILN_CHECK(x.dim() >= 2, op, ": expected an input (N, C, ...) with at least 2 dims, got shape ", x.shape());
  KILN_CHECK(is_floating(x.dtype()), op, ": expected a floating-point input, got ", x.dtype());
}

// An optional per-channel tensor: (C), floating, on x's device.
void check_per_channel(const Tensor& t, const char* what, const Tensor& x) {
  if (!t.defined()) return;
  KILN_CHECK(t.dim() == 1 && t.size(0) == x.size(1), "batch_norm: ", what, " must have shape [", x.size(1),
             "] (one value per channel of the input ", x.shape(), "), got shape ", t.shape());
  KILN_CHECK(t.device() == x.device(), "batch_norm: ", what, " is on ", t.device(), " but the input is on ",
             x.device());
  KILN_CHECK(is_floating(t.dtype()), "batch_norm: ", what, " must be floating-point, got ", t.dtype());
}

DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// t in dtype dt, contiguous; an undefined tensor stays undefined.
Tensor as_compute(const Tensor& t, DType dt) { return t.defined() ? t.to(dt).contiguous() : Tensor(); }

template <class F>
void dispatch_compute(DType ct, F&& fn) {
  if (ct == DType::f64)
    fn.template operator()<double>();
  else
    fn.template operator()<float>();
}

template <class T>
double as_double(T v) {
  return static_cast<double>(static_cast<acc_t<T>>(v));
}

// Per-channel sums of two terms: fn(k, c, a, b) adds element k's terms to a and b. Each row
// (n, c) of (N, C, inner), `inner` contiguous elements, is summed by one task (rows in parallel);
// the row sums are then added per channel in n order. Fixed order: no thread-count dependence.
template <class F>
void channel_sums(const Layout& l, std::vector<double>& sum_a, std::vector<double>& sum_b, F&& fn) {
  const int64_t rows = l.n * l.channels;
  std::vector<double> row_a(rows), row_b(rows);
  parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, l.inner)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      double a = 0, b = 0;
      for (int64_t k = r * l.inner; k < (r + 1) * l.inner; ++k) fn(k, r % l.channels, a, b);
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

BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum, double eps) {
  check_input("batch_norm", x);
  KILN_CHECK(eps >= 0, "batch_norm: eps must be non-negative, got ", eps);
  check_per_channel(weight, "weight", x);
  check_per_channel(bias, "bias", x);
  check_per_channel(running_mean, "running_mean", x);
  check_per_channel(running_var, "running_var", x);
  KILN_CHECK(running_mean.defined() == running_var.defined(),
             "batch_norm: running_mean and running_var must be both given or both undefined");
  const Layout l = layout_of(x);
  if (training) {
    KILN_CHECK(l.count() > 1, "batch_norm: expected more than 1 value per channel when training, got input shape ",
               x.shape());
  } else {
    KILN_CHECK(running_mean.defined(), "batch_norm: eval mode (training = false) needs running_mean and running_var");
  }
  if constexpr (cuda::kBuilt)
    if (x.device().is_cuda()) return cuda::batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps);
  check_cpu("batch_norm", {&x});

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

  BatchNormResult r{empty(x.shape(), x.dtype()), empty({channels}, ct), empty({channels}, ct)};
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

BatchNormGrads batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& invstd, bool training, std::array<bool, 3> needs) {
  check_input("batch_norm_backward", x);
  KILN_CHECK(grad_out.defined() && grad_out.shape() == x.shape(), "batch_norm_backward: grad_out of shape ",
             grad_out.defined() ? grad_out.shape() : Shape{}, " does not match the input's ", x.shape());
  KILN_CHECK(grad_out.device() == x.device(), "batch_norm_backward: grad_out is on ", grad_out.device(),
             " but the input is on ", x.device());
  KILN_CHECK(mean.defined() && invstd.defined(), "batch_norm_backward: needs the forward's mean and invstd");
  check_per_channel(mean, "mean", x);
  check_per_channel(invstd, "invstd", x);
  check_per_channel(weight, "weight", x);
  if constexpr (cuda::kBuilt)
    if (x.device().is_cuda()) return cuda::batch_norm_backward(grad_out, x, weight, mean, invstd, training, needs);
  check_cpu("batch_norm_backward", {&grad_out, &x});

  const Layout l = layout_of(x);
  const DType ct = compute_dtype(x.dtype());
  const int64_t channels = l.channels, m = l.count();
  const Tensor gy = grad_out.to(x.dtype()).contiguous(), xc = x.contiguous();
  const Tensor mc = as_compute(mean, ct), ic = as_compute(invstd, ct), wc = as_compute(weight, ct);
  std::vector<double> sum_dy(channels, 0.0), sum_dy_xhat(channels, 0.0);
  const bool sums = needs[1] || needs[2] || (training && needs[0]);
  BatchNormGrads g;
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

}  // namespace kiln::ops
