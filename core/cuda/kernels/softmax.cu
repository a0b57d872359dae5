// softmax / log_softmax and their backward kernels on the GPU. The input is viewed as (outer, n,
// inner) with n the softmax dim. The last dim (inner == 1) is the hot path: one warp or one block
// per row (Note [Row launches]), the row's max and sum of exp from a single read (Note [Online
// softmax]), a second read writes the output. Another dim: one thread per (outer, inner) column
// walking n with stride inner, so neighbouring threads read neighbouring addresses.
#include <kiln/core/cuda/kernels/softmax.h>

#include <kiln/core/cuda/kernels/elementwise_functors.cuh>
#include <kiln/core/cuda/kernels/softmax.cuh>
#include <kiln/core/formulas.h>

namespace kiln::cuda {

namespace {

using fn::DeviceMath;
using rowwise::MaxSum;

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
    const A stat = Log ? ms.lse() : A(1) / ms.sum();  // formulas::softmax_from_stats
    for (int64_t j = int64_t(threadIdx.x) * V; j < n; j += int64_t(blockDim.x) * V) {
      A v[V];
      rowwise::load_pack<V>(xr + j, v);
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = formulas::softmax_from_stats<DeviceMath, Log>(v[k], ms.m, stat);
      rowwise::store_pack<V>(yr + j, v);
    }
  }
}

template <class T, bool Log>
__global__ void softmax_columns_kernel(T* __restrict__ y,        // (outer, n, inner)
                                       const T* __restrict__ x,  // (outer, n, inner)
                                       int64_t outer, int64_t n, int64_t inner) {
  using A = dacc_t<T>;
  rowwise::for_each_column(outer, n, inner, [&](int64_t base) {
    MaxSum<A> ms;
    for (int64_t r = 0; r < n; ++r) ms.add(load_acc(x[base + r * inner]));
    const A stat = Log ? ms.lse() : A(1) / ms.sum();  // formulas::softmax_from_stats
    for (int64_t r = 0; r < n; ++r) {
      const A v = load_acc(x[base + r * inner]);
      y[base + r * inner] = store_as<T>(formulas::softmax_from_stats<DeviceMath, Log>(v, ms.m, stat));
    }
  });
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
      for (int k = 0; k < V; ++k) s[0] += formulas::softmax_grad_term<Log>(gv[k], yv[k]);
    }
    rowwise::row_sum<1>(s, scratch);
    for (int64_t j = int64_t(threadIdx.x) * V; j < n; j += int64_t(blockDim.x) * V) {
      A gv[V], yv[V];
      rowwise::load_pack<V>(g + base + j, gv);
      rowwise::load_pack<V>(y + base + j, yv);
#pragma unroll
      for (int k = 0; k < V; ++k) gv[k] = formulas::softmax_grad<DeviceMath, Log>(gv[k], yv[k], s[0]);
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
  rowwise::for_each_column(outer, n, inner, [&](int64_t base) {
    A s = 0;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t k = base + r * inner;
      s += formulas::softmax_grad_term<Log>(load_acc(g[k]), load_acc(y[k]));
    }
    for (int64_t r = 0; r < n; ++r) {
      const int64_t k = base + r * inner;
      gi[k] = store_as<T>(formulas::softmax_grad<DeviceMath, Log>(load_acc(g[k]), load_acc(y[k]), s));
    }
  });
}

// out (fresh, like `first`'s dtype and shape) = one of softmax's kernels over the inputs (contiguous
// and of one shape), chosen per dtype T and Log: kernel<T, Log, V>(out, launch) with V > 0 the
// pack width of the row kernels (dim is the last, inner == 1: Note [Row launches]), V = 0 the
// column kernels (one thread per (outer, inner) column).
struct SoftmaxLaunch {
  dim3 grid, block;
  cudaStream_t stream;
  formulas::DimSplit l;
};
template <class Kernel>
Tensor launch_rows_or_columns(const char* op, std::initializer_list<const Tensor*> ins, int64_t dim, bool log,
                              Kernel&& kernel) {
  const Tensor& first = **ins.begin();
  Tensor out = empty(first.shape(), first.dtype(), first.device());
  if (first.numel() == 0) return out;
  SoftmaxLaunch at{dim3(), dim3(), stream_for(first), formulas::split_at(first.shape(), dim)};
  KILN_ASSERT(ins.size() <= 2, op, ": at most two inputs");
  const void* in1 = ins.size() > 1 ? (*(ins.begin() + 1))->data_ptr() : nullptr;
  dispatch_floating_device(first.dtype(), op, [&]<class T>() {
    dispatch_bool(log, [&]<bool Log>() {
      if (at.l.inner == 1) {
        const bool vec = rowwise::can_vectorize(at.l.n, rowwise::kVec<T>, {out.data_ptr(), first.data_ptr(), in1});
        rowwise::with_vec<T>(vec, [&]<int V>() {
          const rowwise::RowLaunch rl = rowwise::row_launch(at.l.outer, at.l.n, V);
          at.grid = rowwise::grid_of(rl);
          at.block = rowwise::block_of(rl);
          kernel.template operator()<T, Log, V>(out, at);
        });
      } else {
        at.grid = dim3(blocks_for(at.l.outer * at.l.inner));
        at.block = dim3(kThreads);
        kernel.template operator()<T, Log, 0>(out, at);
      }
    });
    KILN_CUDA_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace

Tensor softmax(const char* op, const Tensor& x_in, int64_t dim, bool log) {
  const Tensor x = x_in.contiguous();
  return launch_rows_or_columns(op, {&x}, dim, log,
                                [&]<class T, bool Log, int V>(const Tensor& y, const SoftmaxLaunch& at) {
    if constexpr (V > 0)
      softmax_rows_kernel<T, V, Log><<<at.grid, at.block, 0, at.stream>>>(ptr<T>(y), ptr<T>(x), at.l.outer, at.l.n);
    else
      softmax_columns_kernel<T, Log><<<at.grid, at.block, 0, at.stream>>>(ptr<T>(y), ptr<T>(x), at.l.outer, at.l.n,
                                                                          at.l.inner);
  });
}

Tensor softmax_backward(const char* op, const Tensor& grad_out, const Tensor& out, int64_t dim, bool log) {
  const Tensor y = out.contiguous(), g = grad_out.contiguous();
  return launch_rows_or_columns(op, {&y, &g}, dim, log,
                                [&]<class T, bool Log, int V>(const Tensor& gi, const SoftmaxLaunch& at) {
    if constexpr (V > 0)
      softmax_backward_rows_kernel<T, V, Log><<<at.grid, at.block, 0, at.stream>>>(ptr<T>(gi), ptr<T>(g), ptr<T>(y),
                                                                                   at.l.outer, at.l.n);
    else
      softmax_backward_columns_kernel<T, Log><<<at.grid, at.block, 0, at.stream>>>(ptr<T>(gi), ptr<T>(g), ptr<T>(y),
                                                                                   at.l.outer, at.l.n, at.l.inner);
  });
}

}  // namespace kiln::cuda
