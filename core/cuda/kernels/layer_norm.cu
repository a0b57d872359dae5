// Layer norm on the GPU, x viewed as (rows, n). Forward: one warp or one block per row (Note [Row
// launches]), mean and then the variance around it (two reads; the row is still in L1/L2), a third
// read writes out; mean and rstd are saved per row (f32, f64 for f64 input, as on the CPU).
// Backward (the llm.c layernorm_backward idea): each block owns a run of rows and writes grad_x for
// them while summing its own grad_weight / grad_bias partials in float (in shared memory when they
// fit); a second kernel adds the per-block partials in a fixed order, so results are deterministic
// without float atomics. 16-byte vectors when n and the pointers allow, scalar otherwise.
// With a residual (Note [Fused residual add], core/ops/layer_norm.h) the forward's first pass reads
// x and the residual and writes their sum, which the later passes read back (this thread's own
// writes, at the same columns); the backward adds the sum's gradient into grad_x as it writes it.
// The vector width, the forward's rows per block and the backward's form, blocks and partials
// follow cuda::layer_norm_variant() (Note [Layer norm variants]).
//
// Note [Split layer-norm backward]
// The fused backward above gives a block one row at a time (96 threads for a row of 768 bf16) and
// walks its run of rows in turn: on an H200, 264 such blocks leave each SM a few warps, and a row of
// gpt2-124m took 0.13 ms for 75 MB (0.6 TB/s; 3.6 ms of a 49.5 ms step in 25 calls). The split form
// (bwd=split) writes grad_x with the forward's launch, a warp per row (Note [Row launches]), and
// computes grad_weight / grad_bias in a second kernel over columns: a block owns 32 column vectors
// and a run of rows, 8 rows at a time, and adds its rows' g * xhat and g in a fixed order, then the
// partials of all runs in order as before. It reads g and x twice (once per kernel), and every
// sum has a fixed order: deterministic, without atomics. On an H200 (2026-11-28) it took 0.062 ms
// against the fused form's 0.130 at (16384, 768) bf16 and 0.138 against 0.166 at (16384, 2048), with
// 264 blocks (528, 1056 and 2112 were slower): the default since.
#include <kiln/core/cuda/kernels/layer_norm.h>

#include <algorithm>

#include <kiln/core/cuda/kernels/softmax.cuh>
#include <kiln/core/cuda/plan/layer_norm_variant.h>
#include <kiln/cuda.h>

namespace kiln::cuda {

namespace {

using namespace rowwise;

// Partial sums use shared memory below the 48 KiB a block gets without opting in (less the static
// scratch); longer rows keep them in the global scratch tensor.
constexpr size_t kMaxSharedPartials = 46 * 1024;

template <class T, class P, class R, int V>
__global__ void __launch_bounds__(1024, 1) layer_norm_forward_kernel(T* __restrict__ out,           // (rows, n)
                                          dacc_t<T>* __restrict__ mean,  // (rows,)
                                          dacc_t<T>* __restrict__ rstd,  // (rows,)
                                          const T* __restrict__ x,       // (rows, n)
                                          const R* __restrict__ residual,  // (rows, n) or null
                                          T* __restrict__ sum_out,       // (rows, n): x + residual, or null
                                          const P* __restrict__ weight,  // (n,) or null
                                          const P* __restrict__ bias,    // (n,) or null
                                          int64_t rows, int64_t n, dacc_t<T> eps) {
  using A = dacc_t<T>;
  __shared__ A scratch[32];
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  const int64_t first = int64_t(threadIdx.x) * V, stride = int64_t(blockDim.x) * V;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < rows; row += step) {
    const T* xr = x + row * n;
    A sum[1] = {A(0)};
    for (int64_t j = first; j < n; j += stride) {
      A v[V];
      load_pack<V>(xr + j, v);
      if (residual) {  // s = x + residual, rounded to T as an elementwise add would store it
        A r[V];
        load_pack<V>(residual + row * n + j, r);
        T s[V];
#pragma unroll
        for (int k = 0; k < V; ++k) {
          s[k] = store_as<T>(v[k] + r[k]);
          v[k] = static_cast<A>(load_acc(s[k]));
        }
        Pack<T, V> p;
#pragma unroll
        for (int k = 0; k < V; ++k) p.v[k] = s[k];
        *reinterpret_cast<Pack<T, V>*>(sum_out + row * n + j) = p;
      }
#pragma unroll
      for (int k = 0; k < V; ++k) sum[0] += v[k];
    }
    if (residual) xr = sum_out + row * n;
    row_sum<1>(sum, scratch);
    const A mu = sum[0] / A(n);
    A sq[1] = {A(0)};
    for (int64_t j = first; j < n; j += stride) {
      A v[V];
      load_pack<V>(xr + j, v);
#pragma unroll
      for (int k = 0; k < V; ++k) sq[0] += (v[k] - mu) * (v[k] - mu);
    }
    row_sum<1>(sq, scratch);
    const A rs = A(1) / sqrt_of(sq[0] / A(n) + eps);
    for (int64_t j = first; j < n; j += stride) {
      A v[V], w[V], b[V];
      load_pack<V>(xr + j, v);
      if (weight) load_pack<V>(weight + j, w);
      if (bias) load_pack<V>(bias + j, b);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        A y = (v[k] - mu) * rs;
        if (weight) y *= w[k];
        if (bias) y += b[k];
        v[k] = y;
      }
      store_pack<V>(out + row * n + j, v);
    }
    if (threadIdx.x == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
  }
}

// One block (blockDim (threads, 1)) per run of rows_per_block rows. Thread k owns the columns of
// its chunks (Note [Row launches]) in the partial sums: it alone zeroes, adds to and copies them
// out, so they need neither barriers nor atomics.
template <class T, class P, int V>
__global__ void __launch_bounds__(1024, 1) layer_norm_backward_kernel(T* __restrict__ grad_x,               // (rows, n)
                                           const T* __restrict__ grad_res,       // (rows, n) or null: added
                                           dacc_t<T>* __restrict__ part_w,       // (gridDim.x, n) or null
                                           dacc_t<T>* __restrict__ part_b,       // (gridDim.x, n) or null
                                           const T* __restrict__ g,              // (rows, n)
                                           const T* __restrict__ x,              // (rows, n)
                                           const dacc_t<T>* __restrict__ mean,   // (rows,)
                                           const dacc_t<T>* __restrict__ rstd,   // (rows,)
                                           const P* __restrict__ weight,         // (n,) or null
                                           int64_t rows, int64_t n, int64_t rows_per_block, bool in_shared) {
  using A = dacc_t<T>;
  extern __shared__ __align__(16) unsigned char shared_partials[];  // (parts, n) when in_shared
  __shared__ A scratch[64];
  A* acc_w = nullptr;
  A* acc_b = nullptr;
  if (in_shared) {
    A* base = reinterpret_cast<A*>(shared_partials);
    if (part_w) acc_w = base;
    if (part_b) acc_b = base + (part_w ? n : 0);
  } else {
    if (part_w) acc_w = part_w + int64_t(blockIdx.x) * n;
    if (part_b) acc_b = part_b + int64_t(blockIdx.x) * n;
  }
  const int64_t first = int64_t(threadIdx.x) * V, stride = int64_t(blockDim.x) * V;
  for (int64_t j = first; j < n; j += stride) {
    A zero[V];
#pragma unroll
    for (int k = 0; k < V; ++k) zero[k] = A(0);
    if (acc_w) store_pack<V>(acc_w + j, zero);
    if (acc_b) store_pack<V>(acc_b + j, zero);
  }
  const int64_t r0 = int64_t(blockIdx.x) * rows_per_block;
  const int64_t r1 = r0 + rows_per_block < rows ? r0 + rows_per_block : rows;
  for (int64_t row = r0; row < r1; ++row) {
    const A mu = mean[row], rs = rstd[row];
    const T* gr = g + row * n;
    const T* xr = x + row * n;
    // dn = g * weight; grad_x = rstd * (dn - mean(dn) - xhat * mean(dn * xhat))
    A red[2] = {A(0), A(0)};
    for (int64_t j = first; j < n; j += stride) {
      A gv[V], xv[V], wv[V], aw[V], ab[V];
      load_pack<V>(gr + j, gv);
      load_pack<V>(xr + j, xv);
      if (weight) load_pack<V>(weight + j, wv);
      if (acc_w) load_pack<V>(acc_w + j, aw);
      if (acc_b) load_pack<V>(acc_b + j, ab);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const A xh = (xv[k] - mu) * rs;
        const A dn = weight ? gv[k] * wv[k] : gv[k];
        red[0] += dn;
        red[1] += dn * xh;
        if (acc_w) aw[k] += gv[k] * xh;
        if (acc_b) ab[k] += gv[k];
      }
      if (acc_w) store_pack<V>(acc_w + j, aw);
      if (acc_b) store_pack<V>(acc_b + j, ab);
    }
    row_sum<2>(red, scratch);
    const A a = red[0] / A(n), b = red[1] / A(n);
    for (int64_t j = first; j < n; j += stride) {
      A gv[V], xv[V], wv[V];
      load_pack<V>(gr + j, gv);
      load_pack<V>(xr + j, xv);
      if (weight) load_pack<V>(weight + j, wv);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const A xh = (xv[k] - mu) * rs;
        const A dn = weight ? gv[k] * wv[k] : gv[k];
        gv[k] = rs * (dn - a - xh * b);
      }
      if (grad_res) {  // rounded to T first, then added, as layer_norm_backward + add would
        A rv[V];
        load_pack<V>(grad_res + row * n + j, rv);
#pragma unroll
        for (int k = 0; k < V; ++k) gv[k] = static_cast<A>(load_acc(store_as<T>(gv[k]))) + rv[k];
      }
      store_pack<V>(grad_x + row * n + j, gv);
    }
  }
  if (in_shared) {
    for (int64_t j = first; j < n; j += stride) {
      A v[V];
      if (acc_w) {
        load_pack<V>(acc_w + j, v);
        store_pack<V>(part_w + int64_t(blockIdx.x) * n + j, v);
      }
      if (acc_b) {
        load_pack<V>(acc_b + j, v);
        store_pack<V>(part_b + int64_t(blockIdx.x) * n + j, v);
      }
    }
  }
}

// grad_x alone (the split form, Note [Split layer-norm backward]): the fused kernel's two passes
// over each row, a warp or a block per row as the forward's launch.
template <class T, class P, int V>
__global__ void __launch_bounds__(1024, 1) layer_norm_backward_dx_kernel(T* __restrict__ grad_x,          // (rows, n)
                                                                        const T* __restrict__ grad_res,  // or null
                                                                        const T* __restrict__ g,         // (rows, n)
                                                                        const T* __restrict__ x,         // (rows, n)
                                                                        const dacc_t<T>* __restrict__ mean,
                                                                        const dacc_t<T>* __restrict__ rstd,
                                                                        const P* __restrict__ weight,  // (n,) or null
                                                                        int64_t rows, int64_t n) {
  using A = dacc_t<T>;
  __shared__ A scratch[64];
  const int64_t first = int64_t(threadIdx.x) * V, stride = int64_t(blockDim.x) * V;
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < rows; row += step) {
    const A mu = mean[row], rs = rstd[row];
    const T* gr = g + row * n;
    const T* xr = x + row * n;
    A red[2] = {A(0), A(0)};
    for (int64_t j = first; j < n; j += stride) {
      A gv[V], xv[V], wv[V];
      load_pack<V>(gr + j, gv);
      load_pack<V>(xr + j, xv);
      if (weight) load_pack<V>(weight + j, wv);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const A xh = (xv[k] - mu) * rs;
        const A dn = weight ? gv[k] * wv[k] : gv[k];
        red[0] += dn;
        red[1] += dn * xh;
      }
    }
    row_sum<2>(red, scratch);
    const A a = red[0] / A(n), b = red[1] / A(n);
    for (int64_t j = first; j < n; j += stride) {
      A gv[V], xv[V], wv[V];
      load_pack<V>(gr + j, gv);
      load_pack<V>(xr + j, xv);
      if (weight) load_pack<V>(weight + j, wv);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const A xh = (xv[k] - mu) * rs;
        const A dn = weight ? gv[k] * wv[k] : gv[k];
        gv[k] = rs * (dn - a - xh * b);
      }
      if (grad_res) {  // rounded to T first, then added, as layer_norm_backward + add would
        A rv[V];
        load_pack<V>(grad_res + row * n + j, rv);
#pragma unroll
        for (int k = 0; k < V; ++k) gv[k] = static_cast<A>(load_acc(store_as<T>(gv[k]))) + rv[k];
      }
      store_pack<V>(grad_x + row * n + j, gv);
    }
  }
}

// Rows a thread of the column kernel handles at once (their loads issued together).
constexpr int kParamRows = 8;   // blockDim.y
constexpr int kParamUnroll = 4;

// grad_weight / grad_bias partials (the split form): blockDim (32, kParamRows); block (tile, run)
// owns columns [tile * 32 V, (tile + 1) * 32 V) and rows [run * rows_per_run, ...). Thread (tx, ty)
// adds rows ty, ty + kParamRows, ... of the run at its V columns, in that order; the block then adds
// its kParamRows threads per column in order of ty and writes part[run, column].
template <class T, int V>
__global__ void __launch_bounds__(32 * kParamRows) layer_norm_param_grads_kernel(
    dacc_t<T>* __restrict__ part_w,  // (runs, n) or null
    dacc_t<T>* __restrict__ part_b,  // (runs, n) or null
    const T* __restrict__ g, const T* __restrict__ x, const dacc_t<T>* __restrict__ mean,
    const dacc_t<T>* __restrict__ rstd, int64_t rows, int64_t n, int64_t rows_per_run) {
  using A = dacc_t<T>;
  __shared__ A sw[kParamRows][32 * V];
  __shared__ A sb[kParamRows][32 * V];
  const int64_t col = (int64_t(blockIdx.x) * 32 + threadIdx.x) * V;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_run;
  const int64_t r1 = r0 + rows_per_run < rows ? r0 + rows_per_run : rows;
  A aw[V], ab[V];
#pragma unroll
  for (int k = 0; k < V; ++k) aw[k] = ab[k] = A(0);
  if (col < n) {  // V divides n (can_vectorize), so a vector is wholly inside or outside
    const int64_t rstep = int64_t(kParamRows) * kParamUnroll;
    for (int64_t base = r0 + threadIdx.y; base < r1; base += rstep) {
      A gv[kParamUnroll][V], xv[kParamUnroll][V], mu[kParamUnroll], rs[kParamUnroll];
#pragma unroll
      for (int u = 0; u < kParamUnroll; ++u) {  // every load first
        const int64_t row = base + int64_t(u) * kParamRows;
        if (row < r1) {
          load_pack<V>(g + row * n + col, gv[u]);
          load_pack<V>(x + row * n + col, xv[u]);
          mu[u] = mean[row];
          rs[u] = rstd[row];
        }
      }
#pragma unroll
      for (int u = 0; u < kParamUnroll; ++u) {
        if (base + int64_t(u) * kParamRows < r1) {
#pragma unroll
          for (int k = 0; k < V; ++k) {
            aw[k] += gv[u][k] * ((xv[u][k] - mu[u]) * rs[u]);
            ab[k] += gv[u][k];
          }
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) {
    sw[threadIdx.y][threadIdx.x * V + k] = aw[k];
    sb[threadIdx.y][threadIdx.x * V + k] = ab[k];
  }
  __syncthreads();
  // Thread (tx, ty) adds the kParamRows values of columns tx + 32 i (i = ty, ty + kParamRows, ...).
  for (int c = threadIdx.y * 32 + threadIdx.x; c < 32 * V; c += 32 * kParamRows) {
    const int64_t j = int64_t(blockIdx.x) * 32 * V + c;
    if (j >= n) continue;
    A tw = A(0), tb = A(0);
#pragma unroll
    for (int r = 0; r < kParamRows; ++r) {
      tw += sw[r][c];
      tb += sb[r][c];
    }
    if (part_w) part_w[int64_t(blockIdx.y) * n + j] = tw;
    if (part_b) part_b[int64_t(blockIdx.y) * n + j] = tb;
  }
}

// out[j] = sum over blocks b, in order, of part[b, j] (in double).
template <class A, class O>
__global__ void sum_partials_kernel(O* __restrict__ out,         // (n,)
                                    const A* __restrict__ part,  // (blocks, n)
                                    int64_t blocks, int64_t n) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
    double s = 0;
    for (int64_t b = 0; b < blocks; ++b) s += static_cast<double>(part[b * n + j]);
    out[j] = store_as<O>(s);
  }
}

// f.template operator()<V>() with V the variant's elements per access (Note [Layer norm variants]):
// 16 bytes, 8 bytes or one element; one element wherever n or a pointer rules vectors out.
template <class T, class F>
void with_variant_vec(const LayerNormVariant& variant, int64_t n, std::initializer_list<const void*> ptrs, F&& f) {
  constexpr int kFull = kVec<T>, kHalf = kVec<T> / 2;
  const int want = layer_norm_vec(variant, sizeof(T));
  if (want >= kFull && can_vectorize(n, kFull, ptrs)) return f.template operator()<kFull>();
  if constexpr (kHalf > 1) {
    if (want >= kHalf && can_vectorize(n, kHalf, ptrs)) return f.template operator()<kHalf>();
  }
  f.template operator()<1>();
}

DType stats_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// Parameters in x's dtype are read as they are; any other dtype is converted to the compute dtype
// (f32, f64 for f64 x) once, so the kernels see P = T or P = dacc_t<T>.
bool params_in_x_dtype(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return (!weight.defined() || weight.dtype() == x.dtype()) && (!bias.defined() || bias.dtype() == x.dtype());
}
Tensor param_as(const Tensor& p, DType dt) { return p.defined() ? p.to(dt).contiguous() : Tensor(); }

template <class P>
const P* ptr_or_null(const Tensor& t) {
  return t.defined() ? ptr<const P>(t) : nullptr;
}
const void* data_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

template <class T, class F>
void with_param(bool in_x_dtype, F&& f) {
  if (in_x_dtype) f.template operator()<T>();
  else f.template operator()<dacc_t<T>>();
}

// f.template operator()<R>() with R the residual's element type: x's, or bf16/f16 beside an f32 x
// (the front casts anything else); R = T when there is no residual.
template <class T, class F>
void with_residual(const Tensor& residual, F&& f) {
  if constexpr (std::is_same_v<T, float>) {
    if (residual.defined() && residual.dtype() == DType::bf16) return f.template operator()<__nv_bfloat16>();
    if (residual.defined() && residual.dtype() == DType::f16) return f.template operator()<__half>();
  }
  f.template operator()<T>();
}

// The split form of layer_norm_backward (Note [Split layer-norm backward]); the checks and
// allocations are the caller's.
ops::LayerNormGrads split_backward(ops::LayerNormGrads& grads, const LayerNormVariant& variant, const Tensor& x,
                                   const Tensor& g, const Tensor& gres, const Tensor& mu, const Tensor& rs,
                                   const Tensor& w, bool same, int64_t rows, int64_t n, int64_t parts, bool want_w,
                                   bool with_bias, cudaStream_t s) {
  const char* op = "layer_norm_backward";
  dispatch_floating_device(x.dtype(), op, [&]<class T>() {
    using A = dacc_t<T>;
    with_param<T>(same, [&]<class P>() {
      with_variant_vec<T>(variant, n, {x.data_ptr(), g.data_ptr(), grads.grad_x.data_ptr(), data_or_null(w),
                                       data_or_null(gres)}, [&]<int V>() {
        const RowLaunch rl = layer_norm_forward_launch(variant, rows, n, V);
        layer_norm_backward_dx_kernel<T, P, V><<<grid_of(rl), block_of(rl), 0, s>>>(
            ptr<T>(grads.grad_x), gres.defined() ? ptr<const T>(gres) : nullptr, ptr<const T>(g), ptr<const T>(x),
            ptr<const A>(mu), ptr<const A>(rs), ptr_or_null<P>(w), rows, n);
      });
    });
    KILN_CUDA_CHECK_LAUNCH();
    if (parts == 0) return;
    // Partials need V | n only: the column kernel reads g and x, which the front made contiguous.
    with_variant_vec<T>(variant, n, {x.data_ptr(), g.data_ptr()}, [&]<int V>() {
      const int64_t tiles = (n + 32 * V - 1) / (32 * V);
      const RowSplit runs = split_rows(rows, std::max<int64_t>(1, variant.bwd_blocks / tiles));
      const Tensor partials = empty({parts, runs.blocks, n}, stats_dtype(x.dtype()), x.device());
      A* part_w = want_w ? ptr<A>(partials) : nullptr;
      A* part_b = with_bias ? ptr<A>(partials) + (want_w ? runs.blocks * n : 0) : nullptr;
      layer_norm_param_grads_kernel<T, V><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(runs.blocks)),
                                            dim3(32, kParamRows), 0, s>>>(part_w, part_b, ptr<const T>(g),
                                                                          ptr<const T>(x), ptr<const A>(mu),
                                                                          ptr<const A>(rs), rows, n,
                                                                          runs.rows_per_block);
      KILN_CUDA_CHECK_LAUNCH();
      auto sum_into = [&](Tensor& out, const A* part) {
        dispatch_floating_device(out.dtype(), op, [&]<class O>() {
          sum_partials_kernel<A, O><<<blocks_for(n), kThreads, 0, s>>>(ptr<O>(out), part, runs.blocks, n);
        });
        KILN_CUDA_CHECK_LAUNCH();
      };
      if (want_w) sum_into(grads.grad_weight, part_w);
      if (with_bias) sum_into(grads.grad_bias, part_b);
    });
  });
  return grads;
}

}  // namespace

ops::LayerNormResult layer_norm(const Tensor& x_in, const Tensor& residual_in, int64_t n, const Tensor& weight,
                                const Tensor& bias, double eps) {
  cudaStream_t s = stream_for(x_in);
  const Tensor x = x_in.contiguous();
  const Tensor residual = residual_in.defined() ? residual_in.contiguous() : Tensor();
  const Device dev = x.device();
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  const DType sdt = stats_dtype(x.dtype());
  ops::LayerNormResult r{empty(x.shape(), x.dtype(), dev), empty({rows}, sdt, dev), empty({rows}, sdt, dev),
                         residual.defined() ? empty(x.shape(), x.dtype(), dev) : Tensor()};
  if (rows == 0) return r;
  const bool same = params_in_x_dtype(x, weight, bias);
  const Tensor w = param_as(weight, same ? x.dtype() : sdt), b = param_as(bias, same ? x.dtype() : sdt);
  const LayerNormVariant variant = layer_norm_variant();
  dispatch_floating_device(x.dtype(), "layer_norm", [&]<class T>() {
    using A = dacc_t<T>;
    with_param<T>(same, [&]<class P>() {
      with_residual<T>(residual, [&]<class R>() {
        with_variant_vec<T>(variant, n, {x.data_ptr(), r.out.data_ptr(), data_or_null(w), data_or_null(b),
                                         data_or_null(residual), data_or_null(r.sum)}, [&]<int V>() {
          const RowLaunch rl = layer_norm_forward_launch(variant, rows, n, V);
          layer_norm_forward_kernel<T, P, R, V><<<grid_of(rl), block_of(rl), 0, s>>>(
              ptr<T>(r.out), ptr<A>(r.mean), ptr<A>(r.rstd), ptr<const T>(x),
              residual.defined() ? ptr<const R>(residual) : nullptr, r.sum.defined() ? ptr<T>(r.sum) : nullptr,
              ptr_or_null<P>(w), ptr_or_null<P>(b), rows, n, static_cast<A>(eps));
        });
      });
    });
    KILN_CUDA_CHECK_LAUNCH();
  });
  return r;
}

ops::LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& grad_residual, const Tensor& x_in,
                                        const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                        const Shape& normalized_shape, bool with_bias) {
  const char* op = "layer_norm_backward";
  cudaStream_t s = stream_for(x_in);
  const Tensor x = x_in.contiguous(), g = grad_out.contiguous();
  const Tensor gres = grad_residual.defined() ? grad_residual.contiguous() : Tensor();  // x's dtype (the front)
  const Device dev = x.device();
  const int64_t n = shape_numel(normalized_shape);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  const DType sdt = stats_dtype(x.dtype());
  const Tensor mu = mean.to(sdt).contiguous(), rs = rstd.to(sdt).contiguous();
  const bool want_w = weight.defined();
  ops::LayerNormGrads grads;
  grads.grad_x = empty(x.shape(), x.dtype(), dev);
  if (want_w) grads.grad_weight = empty(normalized_shape, weight.dtype(), dev);
  if (with_bias) grads.grad_bias = empty(normalized_shape, want_w ? weight.dtype() : x.dtype(), dev);
  if (rows == 0) {  // sums over no rows (and no grad_x to add to)
    if (want_w) grads.grad_weight.zero_();
    if (with_bias) grads.grad_bias.zero_();
    return grads;
  }
  const bool same = params_in_x_dtype(x, weight, Tensor());
  const Tensor w = param_as(weight, same ? x.dtype() : sdt);
  const LayerNormVariant variant = layer_norm_variant();
  const int64_t parts = int64_t(want_w) + int64_t(with_bias);
  if (variant.bwd == LayerNormVariant::Backward::split)
    return split_backward(grads, variant, x, g, gres, mu, rs, w, same, rows, n, parts, want_w, with_bias, s);
  const RowSplit split = layer_norm_backward_split(variant, rows);
  const Tensor partials = parts > 0 ? empty({parts, split.blocks, n}, sdt, dev) : Tensor();

  dispatch_floating_device(x.dtype(), op, [&]<class T>() {
    using A = dacc_t<T>;
    A* part_w = want_w ? ptr<A>(partials) : nullptr;
    A* part_b = with_bias ? ptr<A>(partials) + (want_w ? split.blocks * n : 0) : nullptr;
    with_param<T>(same, [&]<class P>() {
      with_variant_vec<T>(variant, n, {x.data_ptr(), g.data_ptr(), grads.grad_x.data_ptr(), data_or_null(w),
                                       data_or_null(partials), data_or_null(gres)}, [&]<int V>() {
        const int threads = block_row_threads(n, V);
        const size_t shared = static_cast<size_t>(parts * n) * sizeof(A);
        const bool in_shared = layer_norm_partials_in_shared(variant, shared, kMaxSharedPartials);
        layer_norm_backward_kernel<T, P, V><<<static_cast<unsigned>(split.blocks), threads, in_shared ? shared : 0, s>>>(
            ptr<T>(grads.grad_x), gres.defined() ? ptr<const T>(gres) : nullptr, part_w, part_b, ptr<const T>(g),
            ptr<const T>(x), ptr<const A>(mu), ptr<const A>(rs),
            ptr_or_null<P>(w), rows, n, split.rows_per_block, in_shared);
      });
    });
    KILN_CUDA_CHECK_LAUNCH();
    auto sum_into = [&](Tensor& out, const A* part) {
      dispatch_floating_device(out.dtype(), op, [&]<class O>() {
        sum_partials_kernel<A, O><<<blocks_for(n), kThreads, 0, s>>>(ptr<O>(out), part, split.blocks, n);
      });
      KILN_CUDA_CHECK_LAUNCH();
    };
    if (want_w) sum_into(grads.grad_weight, part_w);
    if (with_bias) sum_into(grads.grad_bias, part_b);
  });
  return grads;
}

}  // namespace kiln::cuda
