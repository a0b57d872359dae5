// CUDA batch norm kernels (batch_norm.h). x is (N, C, inner) contiguous. Per-channel sums: each
// channel is cut into `splits` fixed ranges, a block sums one range in double (stats_kernel,
// grad_sums_kernel) and a per-channel kernel adds the partial sums in order (finalize kernels).
// Elementwise kernels walk x flat with a cursor that tracks the channel (batch_norm_index.h).
#include <kiln/core/cuda/kernels/batch_norm.h>

#include <algorithm>
#include <climits>

#include <kiln/core/cuda/plan/batch_norm_index.h>
#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/factory.h>

namespace kiln::cuda {

namespace {

using batch_norm_index::ChannelCursor;
using batch_norm_index::ElementCursor;
using batch_norm_index::split_begin;

struct Layout {
  int64_t n, channels, inner;
};

Layout layout_of(const Tensor& x) {
  Layout l{x.size(0), x.size(1), 1};
  for (int64_t d = 2; d < x.dim(); ++d) l.inner *= x.size(d);
  return l;
}

constexpr int64_t kTargetBlocks = 1024;  // reduction blocks to aim for (a few per SM)

// Blocks per channel for the reductions: about kTargetBlocks in all, at least 8 values per
// thread. A function of the shape only, so that the sums do not depend on the GPU.
int64_t splits_for(const Layout& l) {
  const int64_t m = l.n * l.inner;
  if (m == 0) return 0;
  int64_t s = ceil_div(kTargetBlocks, std::max<int64_t>(l.channels, 1));
  s = std::min(s, ceil_div(m, int64_t(kThreads) * 8));
  s = std::max<int64_t>(s, 1);
  KILN_CHECK(l.channels * s <= INT_MAX, "batch_norm: ", l.channels, " channels are more than one launch can cover");
  return s;
}

__device__ __forceinline__ void warp_sum2(double& a, double& b) {
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
}

// The block's sums of a and b, left in thread 0. Once per kernel (its shared memory is not
// guarded for reuse); blockDim.x a multiple of 32, at most 1024.
__device__ __forceinline__ void block_sum2(double& a, double& b) {
  __shared__ double sa[32], sb[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  warp_sum2(a, b);
  if (lane == 0) {
    sa[warp] = a;
    sb[warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    a = lane < warps ? sa[lane] : 0.0;
    b = lane < warps ? sb[lane] : 0.0;
    warp_sum2(a, b);
  }
}

// s1, s2 += channel c's two partial sums (partial (C, splits, 2)), added in split order.
__device__ __forceinline__ void combine_splits(const double* partial, int64_t c, int64_t splits, double& s1,
                                               double& s2) {
  for (int64_t s = 0; s < splits; ++s) {
    s1 += partial[(c * splits + s) * 2];
    s2 += partial[(c * splits + s) * 2 + 1];
  }
}

// fn(e, c) for each element e of x (N, C, inner) in a grid-stride loop, with its channel c.
template <class F>
__device__ __forceinline__ void for_each_element(const Layout& l, F&& fn) {
  const int64_t total = l.n * l.channels * l.inner;
  const int64_t start = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  if (start >= total) return;
  ElementCursor cur(start, step, l.inner, l.channels);
  for (int64_t e = start; e < total; e += step, cur.advance()) fn(e, cur.c);
}

// x (N, C, inner) -> partial (C, splits, 2): over range s of channel c (block c * splits + s), the
// sums of d and d^2 with d = x - shift_c, shift_c = x[0, c, 0] (keeps the variance well
// conditioned when the mean is large).
template <class T>
__global__ void stats_kernel(const T* x, double* partial, Layout l, int64_t splits) {
  const int64_t c = blockIdx.x / splits, s = blockIdx.x % splits, m = l.n * l.inner;
  const int64_t begin = split_begin(s, m, splits), end = split_begin(s + 1, m, splits);
  const double shift = static_cast<double>(load_acc(x[c * l.inner]));
  double s1 = 0, s2 = 0;
  ChannelCursor cur(begin + threadIdx.x, blockDim.x, l.inner);
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x, cur.advance()) {
    const double d = static_cast<double>(load_acc(x[cur.offset(c, l.channels)])) - shift;
    s1 += d;
    s2 += d * d;
  }
  block_sum2(s1, s2);
  if (threadIdx.x == 0) {
    partial[(c * splits + s) * 2] = s1;
    partial[(c * splits + s) * 2 + 1] = s2;
  }
}

// Per channel: mean, invstd (C) from the partial sums, and the running buffers (C, or null; R is
// the compute type, or double for f64 buffers) updated with the unbiased variance.
template <class T, class R>
__global__ void finalize_stats_kernel(const T* x, const double* partial, Layout l, int64_t splits, double eps,
                                      double momentum, dacc_t<T>* mean, dacc_t<T>* invstd, R* running_mean,
                                      R* running_var) {
  using A = dacc_t<T>;
  const double m = static_cast<double>(l.n * l.inner);
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < l.channels; c += int64_t(gridDim.x) * blockDim.x) {
    double s1 = 0, s2 = 0;
    combine_splits(partial, c, splits, s1, s2);
    const double shift = static_cast<double>(load_acc(x[c * l.inner]));
    const double d = s1 / m;
    const double mu = shift + d;
    const double var = fmax((s2 - s1 * d) / m, 0.0);  // biased
    mean[c] = static_cast<A>(mu);
    invstd[c] = static_cast<A>(1.0 / sqrt(var + eps));
    if (running_mean) {
      running_mean[c] = static_cast<R>((1.0 - momentum) * static_cast<double>(running_mean[c]) + momentum * mu);
      running_var[c] =
          static_cast<R>((1.0 - momentum) * static_cast<double>(running_var[c]) + momentum * (var * m / (m - 1.0)));
    }
  }
}

// Eval: mean = running_mean, invstd = 1 / sqrt(running_var + eps), per channel.
template <class A>
__global__ void eval_stats_kernel(const A* running_mean, const A* running_var, double eps, A* mean, A* invstd,
                                  int64_t channels) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < channels; c += int64_t(gridDim.x) * blockDim.x) {
    mean[c] = running_mean[c];
    invstd[c] = static_cast<A>(1.0 / sqrt(static_cast<double>(running_var[c]) + eps));
  }
}

// y = ((x - mean) * invstd) * w + b per element (w, b null for 1 and 0).
template <class T>
__global__ void normalize_kernel(const T* x, T* y, const dacc_t<T>* mean, const dacc_t<T>* invstd, const dacc_t<T>* w,
                                 const dacc_t<T>* b, Layout l) {
  using A = dacc_t<T>;
  for_each_element(l, [&](int64_t e, int64_t c) {
    A v = (load_acc(x[e]) - mean[c]) * invstd[c];
    if (w) v = v * w[c];
    if (b) v = v + b[c];
    y[e] = store_as<T>(v);
  });
}

// dy, x (N, C, inner) -> partial (C, splits, 2): sums of dy and dy * x_hat over range s of channel c.
template <class T>
__global__ void grad_sums_kernel(const T* dy, const T* x, const dacc_t<T>* mean, const dacc_t<T>* invstd,
                                 double* partial, Layout l, int64_t splits) {
  const int64_t c = blockIdx.x / splits, s = blockIdx.x % splits, m = l.n * l.inner;
  const int64_t begin = split_begin(s, m, splits), end = split_begin(s + 1, m, splits);
  const double mu = static_cast<double>(mean[c]), is = static_cast<double>(invstd[c]);
  double s1 = 0, s2 = 0;
  ChannelCursor cur(begin + threadIdx.x, blockDim.x, l.inner);
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x, cur.advance()) {
    const int64_t k = cur.offset(c, l.channels);
    const double d = static_cast<double>(load_acc(dy[k]));
    s1 += d;
    s2 += d * ((static_cast<double>(load_acc(x[k])) - mu) * is);
  }
  block_sum2(s1, s2);
  if (threadIdx.x == 0) {
    partial[(c * splits + s) * 2] = s1;
    partial[(c * splits + s) * 2 + 1] = s2;
  }
}

// Per channel: dweight = sum(dy * x_hat), dbias = sum(dy) (each null when not wanted) and the dx
// coefficients coef (C, 3) = (w * invstd, sum(dy) / M, sum(dy * x_hat) / M) (null when not wanted).
template <class A>
__global__ void grad_finalize_kernel(const double* partial, int64_t splits, const A* invstd, const A* w, Layout l,
                                     A* dweight, A* dbias, A* coef) {
  const double m = static_cast<double>(l.n * l.inner);
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < l.channels; c += int64_t(gridDim.x) * blockDim.x) {
    double s1 = 0, s2 = 0;
    combine_splits(partial, c, splits, s1, s2);
    if (dweight) dweight[c] = static_cast<A>(s2);
    if (dbias) dbias[c] = static_cast<A>(s1);
    if (coef) {
      coef[c * 3] = static_cast<A>((w ? static_cast<double>(w[c]) : 1.0) * static_cast<double>(invstd[c]));
      coef[c * 3 + 1] = static_cast<A>(m > 0 ? s1 / m : 0.0);
      coef[c * 3 + 2] = static_cast<A>(m > 0 ? s2 / m : 0.0);
    }
  }
}

// dx = k * (dy - a - x_hat * b) (training) or k * dy (eval), (k, a, b) = coef[c].
template <class T>
__global__ void grad_input_kernel(const T* dy, const T* x, const dacc_t<T>* mean, const dacc_t<T>* invstd,
                                  const dacc_t<T>* coef, T* dx, Layout l, bool training) {
  using A = dacc_t<T>;
  for_each_element(l, [&](int64_t e, int64_t c) {
    const A d = load_acc(dy[e]), k = coef[c * 3];
    if (training) {
      const A xhat = (load_acc(x[e]) - mean[c]) * invstd[c];
      dx[e] = store_as<T>(k * (d - coef[c * 3 + 1] - xhat * coef[c * 3 + 2]));
    } else {
      dx[e] = store_as<T>(k * d);
    }
  });
}

Tensor as_compute(const Tensor& t, DType dt) { return t.defined() ? t.to(dt).contiguous() : Tensor(); }

// A running buffer as the kernels update it: itself when contiguous and of dtype dt, else a copy
// in dt (written back by copy_back).
Tensor staged(const Tensor& buffer, DType dt) {
  return buffer.is_contiguous() && buffer.dtype() == dt ? buffer : buffer.to(dt).contiguous();
}

// Writes a staged copy back into the caller's running buffer (nothing when it was the buffer).
void copy_back(const Tensor& buffer, const Tensor& staged_copy) {
  if (!staged_copy.defined() || staged_copy.is_same(buffer)) return;
  Tensor handle = buffer;  // aliases the caller's buffer
  handle.copy_(staged_copy);
}

template <class A>
A* ptr_or_null(const Tensor& t) {
  return t.defined() ? ptr<A>(t) : nullptr;
}

}  // namespace

ops::BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                                const Tensor& running_var, bool training, double momentum, double eps) {
  const Layout l = layout_of(x);
  const DType ct = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const TensorOptions per_channel = TensorOptions(ct).device(x.device());
  ops::BatchNormResult r{empty(x.shape(), TensorOptions(x.dtype()).device(x.device())), empty({l.channels}, per_channel),
                         empty({l.channels}, per_channel)};
  if (l.channels == 0) return r;
  const Tensor xc = x.contiguous(), wc = as_compute(weight, ct), bc = as_compute(bias, ct);
  cudaStream_t s = stream_for(xc);
  const int64_t total = x.numel();
  dispatch_floating_device(x.dtype(), "batch_norm", [&]<class T>() {
    using A = dacc_t<T>;
    if (training) {  // the front guarantees more than one value per channel
      const int64_t splits = splits_for(l);
      Tensor partial = empty({l.channels * splits * 2}, TensorOptions(DType::f64).device(x.device()));
      stats_kernel<T><<<static_cast<int>(l.channels * splits), kThreads, 0, s>>>(ptr<T>(xc), ptr<double>(partial), l,
                                                                                 splits);
      KILN_CUDA_CHECK_LAUNCH();
      // f64 buffers are updated in double (as the CPU does), others in the compute dtype.
      const DType rt = running_mean.defined() && running_mean.dtype() == DType::f64 ? DType::f64 : ct;
      Tensor rm, rv;
      if (running_mean.defined()) {
        rm = staged(running_mean, rt);
        rv = staged(running_var, rt);
      }
      auto finalize = [&]<class R>() {
        finalize_stats_kernel<T, R><<<blocks_for(l.channels), kThreads, 0, s>>>(
            ptr<T>(xc), ptr<double>(partial), l, splits, eps, momentum, ptr<A>(r.mean), ptr<A>(r.invstd),
            ptr_or_null<R>(rm), ptr_or_null<R>(rv));
        KILN_CUDA_CHECK_LAUNCH();
      };
      if (rt == DType::f64)
        finalize.template operator()<double>();
      else
        finalize.template operator()<A>();
      copy_back(running_mean, rm);
      copy_back(running_var, rv);
    } else {
      const Tensor rm = as_compute(running_mean, ct), rv = as_compute(running_var, ct);
      eval_stats_kernel<A><<<blocks_for(l.channels), kThreads, 0, s>>>(ptr<A>(rm), ptr<A>(rv), eps, ptr<A>(r.mean),
                                                                       ptr<A>(r.invstd), l.channels);
      KILN_CUDA_CHECK_LAUNCH();
    }
    if (total > 0) {
      normalize_kernel<T><<<blocks_for(total), kThreads, 0, s>>>(ptr<T>(xc), ptr<T>(r.out), ptr<A>(r.mean),
                                                                 ptr<A>(r.invstd), ptr_or_null<A>(wc),
                                                                 ptr_or_null<A>(bc), l);
      KILN_CUDA_CHECK_LAUNCH();
    }
  });
  return r;
}

ops::BatchNormGrads batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                        const Tensor& mean, const Tensor& invstd, bool training,
                                        std::array<bool, 3> needs) {
  const Layout l = layout_of(x);
  const DType ct = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const TensorOptions per_channel = TensorOptions(ct).device(x.device());
  ops::BatchNormGrads g;
  if (needs[0]) g.input = empty(x.shape(), TensorOptions(x.dtype()).device(x.device()));
  if (needs[1]) g.weight = empty({l.channels}, per_channel);
  if (needs[2]) g.bias = empty({l.channels}, per_channel);
  if (l.channels == 0) return g;
  const Tensor gy = grad_out.to(x.dtype()).contiguous(), xc = x.contiguous();
  const Tensor mc = as_compute(mean, ct), ic = as_compute(invstd, ct), wc = as_compute(weight, ct);
  const bool sums = needs[1] || needs[2] || (training && needs[0]);
  const int64_t splits = sums ? splits_for(l) : 0;  // 0 as well when channels are empty: all sums are 0
  const int64_t total = x.numel();
  cudaStream_t s = stream_for(xc);
  dispatch_floating_device(x.dtype(), "batch_norm_backward", [&]<class T>() {
    using A = dacc_t<T>;
    Tensor partial;
    if (splits > 0) {
      partial = empty({l.channels * splits * 2}, TensorOptions(DType::f64).device(x.device()));
      grad_sums_kernel<T><<<static_cast<int>(l.channels * splits), kThreads, 0, s>>>(
          ptr<T>(gy), ptr<T>(xc), ptr<A>(mc), ptr<A>(ic), ptr<double>(partial), l, splits);
      KILN_CUDA_CHECK_LAUNCH();
    }
    Tensor coef = needs[0] ? empty({l.channels * 3}, per_channel) : Tensor();  // (C, 3)
    grad_finalize_kernel<A><<<blocks_for(l.channels), kThreads, 0, s>>>(
        ptr_or_null<double>(partial), splits, ptr<A>(ic), ptr_or_null<A>(wc), l, ptr_or_null<A>(g.weight),
        ptr_or_null<A>(g.bias), ptr_or_null<A>(coef));
    KILN_CUDA_CHECK_LAUNCH();
    if (needs[0] && total > 0) {
      grad_input_kernel<T><<<blocks_for(total), kThreads, 0, s>>>(ptr<T>(gy), ptr<T>(xc), ptr<A>(mc), ptr<A>(ic),
                                                                  ptr<A>(coef), ptr<T>(g.input), l, training);
      KILN_CUDA_CHECK_LAUNCH();
    }
  });
  return g;
}

}  // namespace kiln::cuda
