// softmax / log_softmax and their backward kernels on the GPU. The input is viewed as (outer, n,
// inner) with n the softmax dim. The last dim (inner == 1) is the hot path: one warp or one block
// per row (Note [Row launches]), the row's max and sum of exp from a single read (Note [Online
// softmax]), a second read writes the output. Another dim: one thread per (outer, inner) column
// walking n with stride inner, so neighbouring threads read neighbouring addresses.
#include <kiln/core/cuda/kernels/softmax.h>

#include <kiln/core/cuda/kernels/softmax.cuh>

namespace kiln::cuda {

namespace {

using rowwise::MaxSum;

struct Layout {
  int64_t outer = 1, n = 1, inner = 1;
};

Layout layout_of(const Tensor& x, int64_t dim) {
  Layout l;
  for (int64_t k = 0; k < x.dim(); ++k) (k < dim ? l.outer : k == dim ? l.n : l.inner) *= x.size(k);
  return l;
}

template <class T, int V, bool Log>
__global__ void __launch_bounds__(1024, 1) softmax_rows_kernel(T* __restrict__ y,        // (rows, n)
                                    const T* __restrict__ x,  // (rows, n)
                                    int64_t rows, int64_t n) {
  using A = dacc_t<T>;
  __shared__ A scratch[64];
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < rows; row += step) {
    const T* xr = x + row * n;
    T* yr = y + row * n;
    MaxSum<A> ms;
    for (int64_t j = int64_t(threadIdx.x) * V; j < n; j += int64_t(blockDim.x) * V) {
      A v[V];
      rowwise::load_pack<V>(xr + j, v);
#pragma unroll
      for (int k = 0; k < V; ++k) ms.add(v[k]);
    }
    ms = rowwise::row_max_sum(ms, scratch);
    const A lse = ms.lse(), inv = A(1) / ms.sum();
    for (int64_t j = int64_t(threadIdx.x) * V; j < n; j += int64_t(blockDim.x) * V) {
      A v[V];
      rowwise::load_pack<V>(xr + j, v);
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = Log ? v[k] - lse : rowwise::exp_of(v[k] - ms.m) * inv;
      rowwise::store_pack<V>(yr + j, v);
    }
  }
}

template <class T, bool Log>
__global__ void softmax_columns_kernel(T* __restrict__ y,        // (outer, n, inner)
                                       const T* __restrict__ x,  // (outer, n, inner)
                                       int64_t outer, int64_t n, int64_t inner) {
  using A = dacc_t<T>;
  const int64_t columns = outer * inner;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < columns; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    MaxSum<A> ms;
    for (int64_t r = 0; r < n; ++r) ms.add(load_acc(x[base + r * inner]));
    const A lse = ms.lse(), inv = A(1) / ms.sum();
    for (int64_t r = 0; r < n; ++r) {
      const A v = load_acc(x[base + r * inner]);
      y[base + r * inner] = store_as<T>(Log ? v - lse : rowwise::exp_of(v - ms.m) * inv);
    }
  }
}

// softmax: gi = y * (g - sum(g * y)); log_softmax: gi = g - exp(y) * sum(g).
template <class T, int V, bool Log>
__global__ void __launch_bounds__(1024, 1) softmax_backward_rows_kernel(T* __restrict__ gi,       // (rows, n)
                                             const T* __restrict__ g,  // (rows, n)
                                             const T* __restrict__ y,  // (rows, n) the forward output
                                             int64_t rows, int64_t n) {
  using A = dacc_t<T>;
  __shared__ A scratch[32];
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < rows; row += step) {
    const int64_t base = row * n;
    A s[1] = {A(0)};
    for (int64_t j = int64_t(threadIdx.x) * V; j < n; j += int64_t(blockDim.x) * V) {
      A gv[V], yv[V];
      rowwise::load_pack<V>(g + base + j, gv);
      rowwise::load_pack<V>(y + base + j, yv);
#pragma unroll
      for (int k = 0; k < V; ++k) s[0] += Log ? gv[k] : gv[k] * yv[k];
    }
    rowwise::row_sum<1>(s, scratch);
    for (int64_t j = int64_t(threadIdx.x) * V; j < n; j += int64_t(blockDim.x) * V) {
      A gv[V], yv[V];
      rowwise::load_pack<V>(g + base + j, gv);
      rowwise::load_pack<V>(y + base + j, yv);
#pragma unroll
      for (int k = 0; k < V; ++k) gv[k] = Log ? gv[k] - rowwise::exp_of(yv[k]) * s[0] : yv[k] * (gv[k] - s[0]);
      rowwise::store_pack<V>(gi + base + j, gv);
    }
  }
}

template <class T, bool Log>
__global__ void softmax_backward_columns_kernel(T* __restrict__ gi,       // (outer, n, inner)
                                                const T* __restrict__ g,  // (outer, n, inner)
                                                const T* __restrict__ y,  // (outer, n, inner)
                                                int64_t outer, int64_t n, int64_t inner) {
  using A = dacc_t<T>;
  const int64_t columns = outer * inner;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < columns; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    A s = 0;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t k = base + r * inner;
      s += Log ? load_acc(g[k]) : load_acc(g[k]) * load_acc(y[k]);
    }
    for (int64_t r = 0; r < n; ++r) {
      const int64_t k = base + r * inner;
      const A gv = load_acc(g[k]), yv = load_acc(y[k]);
      gi[k] = store_as<T>(Log ? gv - rowwise::exp_of(yv) * s : yv * (gv - s));
    }
  }
}

template <bool Log>
Tensor forward(const char* op, const Tensor& x_in, int64_t dim) {
  cudaStream_t s = stream_for(x_in);
  const Tensor x = x_in.contiguous();
  const Layout l = layout_of(x, dim);
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return y;
  dispatch_floating_device(x.dtype(), op, [&]<class T>() {
    if (l.inner == 1) {
      const bool vec = rowwise::can_vectorize(l.n, rowwise::kVec<T>, {x.data_ptr(), y.data_ptr()});
      rowwise::with_vec<T>(vec, [&]<int V>() {
        const rowwise::RowLaunch rl = rowwise::row_launch(l.outer, l.n, V);
        softmax_rows_kernel<T, V, Log>
            <<<rowwise::grid_of(rl), rowwise::block_of(rl), 0, s>>>(ptr<T>(y), ptr<T>(x), l.outer, l.n);
      });
    } else {
      softmax_columns_kernel<T, Log>
          <<<blocks_for(l.outer * l.inner), kThreads, 0, s>>>(ptr<T>(y), ptr<T>(x), l.outer, l.n, l.inner);
    }
    KILN_CUDA_CHECK_LAUNCH();
  });
  return y;
}

template <bool Log>
Tensor backward(const char* op, const Tensor& grad_out, const Tensor& out, int64_t dim) {
  cudaStream_t s = stream_for(out);
  const Tensor g = grad_out.contiguous(), y = out.contiguous();
  const Layout l = layout_of(y, dim);
  Tensor gi = empty(y.shape(), y.dtype(), y.device());
  if (y.numel() == 0) return gi;
  dispatch_floating_device(y.dtype(), op, [&]<class T>() {
    if (l.inner == 1) {
      const bool vec = rowwise::can_vectorize(l.n, rowwise::kVec<T>, {g.data_ptr(), y.data_ptr(), gi.data_ptr()});
      rowwise::with_vec<T>(vec, [&]<int V>() {
        const rowwise::RowLaunch rl = rowwise::row_launch(l.outer, l.n, V);
        softmax_backward_rows_kernel<T, V, Log><<<rowwise::grid_of(rl), rowwise::block_of(rl), 0, s>>>(
            ptr<T>(gi), ptr<T>(g), ptr<T>(y), l.outer, l.n);
      });
    } else {
      softmax_backward_columns_kernel<T, Log><<<blocks_for(l.outer * l.inner), kThreads, 0, s>>>(
          ptr<T>(gi), ptr<T>(g), ptr<T>(y), l.outer, l.n, l.inner);
    }
    KILN_CUDA_CHECK_LAUNCH();
  });
  return gi;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, bool log) {
  return log ? forward<true>("log_softmax", x, dim) : forward<false>("softmax", x, dim);
}
Tensor softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim, bool log) {
  return log ? backward<true>("log_softmax_backward", grad_out, out, dim)
             : backward<false>("softmax_backward", grad_out, out, dim);
}

}  // namespace kiln::cuda
