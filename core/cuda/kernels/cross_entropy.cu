// Fused softmax cross-entropy on the GPU (llm.c's fused_classifier, split into the forward and
// backward that autograd needs). Forward: one warp or block per row (Note [Row launches]) finds
// the row's max and sum of exp in one read (Note [Online softmax]) and writes only the per-row loss
// and logsumexp. Backward: exp(x - lse) - onehot, scaled per row, written straight into dlogits in
// the logits' dtype. Neither allocates anything of size (N, C) besides dlogits; rows may be strided
// (the first C columns of padded logits are read in place).
#include <kiln/core/cuda/kernels/cross_entropy.h>

#include <kiln/core/cuda/kernels/softmax.cuh>
#include <kiln/cuda.h>

namespace kiln::cuda {

namespace {

using namespace rowwise;

constexpr unsigned long long kNoFault = ~0ull;  // -1 as i64

// Note [Cross-entropy kernels]
// gpt2-124m's (16384, 50257) bf16 cross entropy took 4.05 ms forward and 3.44 ms backward per step
// on an H200, about a quarter of the memory bandwidth, and the width of the loads was not what held
// it (Note [Unaligned rows]). What else might: the forward's online max-sum is one dependency chain
// per thread through libm's expf (a dozen instructions) and a branch per element, and each thread
// has one 16-byte load in flight. The forms (cuda::CrossEntropyKernel, kiln/cuda.h), timed side by
// side by bench_cuda --sweep:
// - accurate: the chain as it was, expf.
// - fast: the same chain with exp2f(x * log2 e) (MUFU.EX2 and a multiply); the backward issues
//   kUnroll loads before it computes any of them.
// - registers: the forward loads the thread's whole share of the row (at most kRegVecs vectors)
//   into registers at once, reduces the max over the row, then adds exp2f((x - max) log2 e) with no
//   chain between elements; rows too long for that take fast. The backward as fast.
// Every form adds a row's terms in its own order, so results differ by rounding only. On an H200
// (2026-11-28, bench_cuda --sweep) the (16384, 50257) bf16 forward took 1.81 ms accurate, 1.59 fast,
// 1.10 registers, the backward 1.23 / 1.21 / 1.21: the chain, not the loads, held the forward, and
// registers is the default. kRegVecs = 7 covers GPT-2's rows with 1024 threads without spilling
// (8 spilled 424 bytes a thread).
constexpr int kUnroll = 4;
constexpr int kRegVecs = 7;

// exp(x) in the form's precision; double always takes exp (no fast form for f64).
template <bool Fast, class A>
__device__ __forceinline__ A ce_exp(A x) {
  if constexpr (Fast && std::is_same_v<A, float>) return exp2f(x * 1.4426950408889634f);
  else return exp_of(x);
}

// MaxSum::add with ce_exp: the same cases (a new max rescales, an equal value adds 1).
template <bool Fast, class A>
__device__ __forceinline__ void max_sum_add(MaxSum<A>& ms, A x) {
  if (x > ms.m) {
    ms.s = ms.s * ce_exp<Fast>(ms.m - x) + A(1);
    ms.m = x;
  } else {
    ms.s += x == ms.m ? A(1) : ce_exp<Fast>(x - ms.m);
  }
}

// Note [Unaligned rows]
// A row of c elements starts on a 16-byte boundary only when c is a multiple of the vector (or it
// is the first row). GPT-2's vocabulary, 50257, is not, so every row was read element by element:
// gpt2-124m's (16384, 50257) cross entropy took 4.24 ms forward and 4.12 ms backward per step on the
// first GPU run (an H200, 2026-11-28). Each row is therefore read as a scalar head up to its first
// 16-byte boundary, whole vectors, and a scalar tail: 4.05 and 3.44 ms on the same GPU, so the width
// of the loads was not what held it (docs/benchmarks.md, "GPU (H200)"). A row that is
// aligned and a multiple of the vector has neither head nor tail, so it adds in the same order as
// before; V == 1 has no head. `row` must be aligned to its element (every tensor's data is).
template <int V, class T>
__device__ __forceinline__ int64_t row_head(const T* row, int64_t c) {
  if constexpr (V == 1) {
    return 0;
  } else {
    const auto misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(row) % 16);
    const int64_t head = misaligned == 0 ? 0 : (16 - misaligned) / static_cast<int64_t>(sizeof(T));
    return head < c ? head : c;
  }
}

// The per-row result both forward kernels write from thread 0: the loss from lse and the sum of the
// row's logits (label smoothing), and the counted row. A row of only -inf reaches here with lse -inf
// (the max-and-sum rule adds 1 per value equal to the max) and is stored as NaN, the CPU's and
// PyTorch's log_softmax answer (exp(-inf - -inf)); its loss and gradient are NaN either way.
template <class T, class A>
__device__ __forceinline__ void finish_row(A* loss, A* lse, unsigned long long* status, const T* xr, int64_t row,
                                           int64_t t, int64_t c, double ls, A l, A sum) {
  if (l == -A(INFINITY)) l = A(NAN);
  double value = -(1.0 - ls) * static_cast<double>(load_acc(xr[t]) - l);
  if (ls > 0)  // sum_c logp[row, c] = sum_c x[row, c] - c * lse
    value -= ls / static_cast<double>(c) * (static_cast<double>(sum) - static_cast<double>(c) * static_cast<double>(l));
  loss[row] = static_cast<A>(value);
  lse[row] = l;
  atomicAdd(&status[0], 1ull);
}

// status[0] counts the rows whose target is not ignore_index; status[1] becomes the first row whose
// target is neither ignore_index nor in [0, c) (kNoFault when none), status[2] is set after.
// Rows whose target is ignored or out of range: a zero loss and lse, and an out-of-range one
// recorded. True when the row is done (the same for every thread of the row).
template <class A>
__device__ __forceinline__ bool skip_row(A* loss, A* lse, unsigned long long* status, int64_t row, int64_t t,
                                         int64_t c, int64_t ignore_index) {
  if (!(t == ignore_index || t < 0 || t >= c)) return false;
  if (threadIdx.x == 0) {
    loss[row] = A(0);
    lse[row] = A(0);
    if (t != ignore_index) atomicMin(&status[1], static_cast<unsigned long long>(row));
  }
  return true;
}

// Row r of the logits starts at logits + r * ld (ld >= c: the first c columns of wider rows).
template <class T, class I, int V, bool Fast>
__global__ void __launch_bounds__(1024, 1)
    cross_entropy_forward_kernel(dacc_t<T>* __restrict__ loss,             // (rows,)
                                 dacc_t<T>* __restrict__ lse,              // (rows,)
                                 unsigned long long* __restrict__ status,  // (3,)
                                 const T* __restrict__ logits,             // (rows, ld)
                                 const I* __restrict__ targets,            // (rows,)
                                 int64_t rows, int64_t c, int64_t ld, int64_t ignore_index, double ls) {
  using A = dacc_t<T>;
  __shared__ A scratch[64];
  __shared__ A scratch_sum[32];
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < rows; row += step) {
    const int64_t t = static_cast<int64_t>(targets[row]);
    if (skip_row(loss, lse, status, row, t, c, ignore_index)) continue;
    const T* xr = logits + row * ld;
    MaxSum<A> ms;
    A sum[1] = {A(0)};  // sum of the logits, for label smoothing
    const int64_t head = row_head<V>(xr, c), body_end = head + (c - head) / V * V;  // Note [Unaligned rows]
    auto add_one = [&](int64_t j) {
      A v[1];
      load_pack<1>(xr + j, v);
      max_sum_add<Fast>(ms, v[0]);
      sum[0] += v[0];
    };
    for (int64_t j = threadIdx.x; j < head; j += blockDim.x) add_one(j);
    for (int64_t j = head + int64_t(threadIdx.x) * V; j < body_end; j += int64_t(blockDim.x) * V) {
      A v[V];
      load_pack<V>(xr + j, v);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        max_sum_add<Fast>(ms, v[k]);
        sum[0] += v[k];
      }
    }
    for (int64_t j = body_end + threadIdx.x; j < c; j += blockDim.x) add_one(j);
    ms = row_max_sum(ms, scratch);
    if (ls > 0) row_sum<1>(sum, scratch_sum);
    if (threadIdx.x == 0) finish_row(loss, lse, status, xr, row, t, c, ls, ms.lse(), sum[0]);
  }
}

// The largest of v over the threads of one row (row_sum's rules; scratch holds 32 values).
template <class A>
__device__ __forceinline__ A row_max(A v, A* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const A w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  if (blockDim.x == 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -A(INFINITY);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const A w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

// The largest of m and a pack's values (NaNs aside: as in fmax, a NaN never becomes the max; the
// sum of exp then carries it). 16-bit packs compare two at a time in their own type (exact).
template <class T, int V, class A>
__device__ __forceinline__ A pack_max(const Pack<T, V>& p, A m) {
  if constexpr ((std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>) && V % 2 == 0) {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    const T2* q = reinterpret_cast<const T2*>(p.v);
    T2 best = q[0];
#pragma unroll
    for (int e = 1; e < V / 2; ++e) best = __hmax2(best, q[e]);
    const A a = load_acc(best.x), b = load_acc(best.y);
    const A pm = a > b ? a : b;
    return pm > m ? pm : m;
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const A x = load_acc(p.v[e]);
      m = x > m ? x : m;
    }
    return m;
  }
}

// The registers form (Note [Cross-entropy kernels]): each thread's vectors of the row, at most
// kRegVecs, are loaded at once and kept; the launch checks that the row fits. A row's max is m, its
// sum of exp(x - m) is s; as MaxSum, a value equal to m adds exactly 1 (an all -inf row gives
// lse -inf, which finish_row stores as NaN), a +inf max gives NaN, and a NaN anywhere makes s NaN (a NaN in a thread's head or tail
// element may become that thread's m, so the threads' m can differ on such a row: its lse is NaN
// whatever m each thread used). Rows are at most kRegVecs vectors a thread: 7 * 32 vectors under a
// warp per row (rows up to 1024 values), 7 * 1024 under a block per row.
template <class T, class I, int V>
__global__ void __launch_bounds__(1024, 1)
    cross_entropy_forward_registers_kernel(dacc_t<T>* __restrict__ loss,             // (rows,)
                                           dacc_t<T>* __restrict__ lse,              // (rows,)
                                           unsigned long long* __restrict__ status,  // (3,)
                                           const T* __restrict__ logits,             // (rows, ld)
                                           const I* __restrict__ targets,            // (rows,)
                                           int64_t rows, int64_t c, int64_t ld, int64_t ignore_index, double ls) {
  using A = dacc_t<T>;
  __shared__ A scratch[32];
  __shared__ A scratch_sum[64];
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < rows; row += step) {
    const int64_t t = static_cast<int64_t>(targets[row]);
    if (skip_row(loss, lse, status, row, t, c, ignore_index)) continue;
    const T* xr = logits + row * ld;
    const int64_t head = row_head<V>(xr, c), body_end = head + (c - head) / V * V;  // Note [Unaligned rows]
    const int vecs = static_cast<int>((body_end - head) / V);  // <= kRegVecs * blockDim.x
    // head and tail are each shorter than V <= 32 <= blockDim.x: at most one element of each per thread.
    const int64_t tail_j = body_end + threadIdx.x;
    const A h = threadIdx.x < head ? load_acc(xr[threadIdx.x]) : -A(INFINITY);
    const A tl = tail_j < c ? load_acc(xr[tail_j]) : -A(INFINITY);
    Pack<T, V> raw[kRegVecs];
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) {
      const int i = static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x);
      if (i < vecs) raw[k] = *reinterpret_cast<const Pack<T, V>*>(xr + head + i * V);
    }
    A m = h > tl ? h : tl;
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) {
      if (static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x) < vecs) m = pack_max(raw[k], m);
    }
    m = row_max(m, scratch);
    auto term = [m](A x) { return x == m ? A(1) : ce_exp<true>(x - m); };
    A acc[2] = {A(0), A(0)};  // sum of exp(x - m), sum of x
    if (threadIdx.x < head) {
      acc[0] += term(h);
      acc[1] += h;
    }
    if (tail_j < c) {
      acc[0] += term(tl);
      acc[1] += tl;
    }
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) {
      if (static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x) < vecs) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const A x = load_acc(raw[k].v[e]);
          acc[0] += term(x);
          acc[1] += x;
        }
      }
    }
    row_sum<2>(acc, scratch_sum);
    if (threadIdx.x == 0) {
      const A l = m == A(INFINITY) ? A(NAN) : m + log_of(acc[0]);
      finish_row(loss, lse, status, xr, row, t, c, ls, l, acc[1]);
    }
  }
}

// status[2] = the target of row status[1], when there is one (one thread, after the forward kernel).
template <class I>
__global__ void bad_target_kernel(const I* __restrict__ targets, unsigned long long* __restrict__ status) {
  if (status[1] != kNoFault)
    status[2] = static_cast<unsigned long long>(static_cast<long long>(targets[static_cast<int64_t>(status[1])]));
}

// dlogits[row, j] = ((p - (j == t ? 1 - ls : 0)) - ls / c) * grad_loss[row * grad_stride] * s,
// s = scale (times 1 / *count when count is given), with p = exp(x - lse); 0 on ignored rows (and
// on out-of-range targets, which the forward reports). Rows of logits are ldx apart, rows of
// dlogits ldd; columns [c, cols) of dlogits get zeros (the gradient of padded logits, whose extra
// columns the loss never read). Fast: ce_exp's fast form and kUnroll vectors loaded at a time.
template <class T, class I, int V, bool Fast>
__global__ void __launch_bounds__(1024, 1)
    cross_entropy_backward_kernel(T* __restrict__ dlogits,                  // (rows, ldd)
                                  const T* __restrict__ logits,             // (rows, ldx)
                                  const I* __restrict__ targets,            // (rows,)
                                  const dacc_t<T>* __restrict__ lse,        // (rows,)
                                  const dacc_t<T>* __restrict__ grad_loss,  // (rows,) or (1,)
                                  const long long* __restrict__ count,      // (1,) or null
                                  int64_t grad_stride, int64_t rows, int64_t c, int64_t ldx, int64_t ldd,
                                  int64_t cols, int64_t ignore_index, double ls, double scale) {
  using A = dacc_t<T>;
  const A on = static_cast<A>(1.0 - ls), off = static_cast<A>(ls / static_cast<double>(c));
  if (count != nullptr) scale *= 1.0 / static_cast<double>(*count);  // as the CPU: scale * (1 / count)
  constexpr int U = Fast ? kUnroll : 1;
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < rows; row += step) {
    const int64_t t = static_cast<int64_t>(targets[row]);
    const bool skip = t == ignore_index || t < 0 || t >= c;
    const A coef = skip ? A(0) : static_cast<A>(static_cast<double>(grad_loss[row * grad_stride]) * scale);
    const A l = skip ? A(0) : lse[row];
    const T* xr = logits + row * ldx;
    T* dr = dlogits + row * ldd;
    // dlogits and logits rows share their offset from a 16-byte boundary (the launch checks it).
    const int64_t head = row_head<V>(xr, c), body_end = head + (c - head) / V * V;  // Note [Unaligned rows]
    auto grad_of = [&](A x, int64_t j) {
      const A p = ce_exp<Fast>(x - l);
      return ((j == t ? p - on : p) - off) * coef;
    };
    auto one = [&](int64_t j) {
      A v[1] = {A(0)};
      if (!skip) {
        load_pack<1>(xr + j, v);
        v[0] = grad_of(v[0], j);
      }
      store_pack<1>(dr + j, v);
    };
    for (int64_t j = threadIdx.x; j < head; j += blockDim.x) one(j);
    const int64_t stride = int64_t(blockDim.x) * V;
    for (int64_t j0 = head + int64_t(threadIdx.x) * V; j0 < body_end; j0 += stride * U) {
      A v[U][V];
#pragma unroll
      for (int u = 0; u < U; ++u) {  // every load first, then the math and the stores
        const int64_t j = j0 + u * stride;
        if (j < body_end) {
          if (skip) {
#pragma unroll
            for (int k = 0; k < V; ++k) v[u][k] = A(0);
          } else {
            load_pack<V>(xr + j, v[u]);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t j = j0 + u * stride;
        if (j < body_end) {
          if (!skip) {
#pragma unroll
            for (int k = 0; k < V; ++k) v[u][k] = grad_of(v[u][k], j + k);
          }
          store_pack<V>(dr + j, v[u]);
        }
      }
    }
    for (int64_t j = body_end + threadIdx.x; j < c; j += blockDim.x) one(j);
    for (int64_t j = c + threadIdx.x; j < cols; j += blockDim.x) dr[j] = store_as<T>(A(0));
  }
}

DType loss_dtype(DType logits) { return logits == DType::f64 ? DType::f64 : DType::f32; }

// Logits as the kernels read them: rows of contiguous values, ld apart (ld >= c). A view of the
// first c columns of wider rows is read in place; any other layout is copied.
Tensor row_major(const Tensor& logits) {
  const int64_t c = logits.size(1);
  if (logits.stride(1) == 1 && (logits.size(0) <= 1 || logits.stride(0) >= c)) return logits;
  return logits.contiguous();
}
int64_t row_stride(const Tensor& x) { return x.size(0) <= 1 ? x.size(1) : x.stride(0); }

// Calls f.template operator()<Fast>() for the form's exp.
template <class F>
void with_form(CrossEntropyKernel form, F&& f) {
  if (form == CrossEntropyKernel::accurate) f.template operator()<false>();
  else f.template operator()<true>();
}

}  // namespace

ops::CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                              double label_smoothing, Tensor& fault) {
  const char* op = "cross_entropy";
  cudaStream_t s = stream_for(logits);
  const Tensor x = row_major(logits), t = targets.contiguous();
  const Device dev = x.device();
  const int64_t rows = x.size(0), c = x.size(1), ld = row_stride(x);
  const CrossEntropyKernel form = cross_entropy_kernel();
  // status: [0] the count, [1] the first bad row, [2] its target. count and fault are views of it.
  Tensor status = empty({3}, DType::i64, dev);
  auto* status_ptr = static_cast<unsigned long long*>(status.data_ptr());
  KILN_CUDA_CHECK(cudaMemsetAsync(status_ptr, 0, sizeof(unsigned long long), s));
  KILN_CUDA_CHECK(cudaMemsetAsync(status_ptr + 1, 0xFF, 2 * sizeof(unsigned long long), s));  // kNoFault
  ops::CrossEntropyResult r{empty({rows}, loss_dtype(x.dtype()), dev), empty({rows}, loss_dtype(x.dtype()), dev),
                            status.narrow(0, 0, 1).reshape({})};
  fault = status.narrow(0, 1, 2);
  if (rows == 0) return r;
  dispatch_floating_device(x.dtype(), op, [&]<class T>() {
    using A = dacc_t<T>;
    dispatch_index(t.dtype(), op, [&]<class I>() {
      with_vec<T>(true, [&]<int V>() {  // any row length and offset: Note [Unaligned rows]
        const RowLaunch rl = row_launch(rows, c, V);
        // registers: the thread's share of the row (head and tail aside) must fit in kRegVecs vectors.
        if (form == CrossEntropyKernel::registers && (c + V - 1) / V <= int64_t(kRegVecs) * rl.block_x) {
          cross_entropy_forward_registers_kernel<T, I, V><<<grid_of(rl), block_of(rl), 0, s>>>(
              ptr<A>(r.loss), ptr<A>(r.lse), status_ptr, ptr<const T>(x), ptr<const I>(t), rows, c, ld, ignore_index,
              label_smoothing);
          return;
        }
        with_form(form, [&]<bool Fast>() {
          cross_entropy_forward_kernel<T, I, V, Fast><<<grid_of(rl), block_of(rl), 0, s>>>(
              ptr<A>(r.loss), ptr<A>(r.lse), status_ptr, ptr<const T>(x), ptr<const I>(t), rows, c, ld, ignore_index,
              label_smoothing);
        });
      });
      KILN_CUDA_CHECK_LAUNCH();
      bad_target_kernel<I><<<1, 1, 0, s>>>(ptr<const I>(t), status_ptr);
    });
    KILN_CUDA_CHECK_LAUNCH();
  });
  return r;  // nothing read back (Note [Deferred device checks])
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t ignore_index, double label_smoothing, double scale, const Tensor& count,
                              int64_t columns) {
  const char* op = "cross_entropy_backward";
  cudaStream_t s = stream_for(logits);
  const Tensor x = row_major(logits), t = targets.contiguous();
  const Device dev = x.device();
  const int64_t rows = x.size(0), c = x.size(1), ldx = row_stride(x);
  const int64_t cols = columns > c ? columns : c;
  const DType ldt = loss_dtype(x.dtype());
  const Tensor l = lse.to(ldt).contiguous(), g = grad_loss.to(ldt).contiguous();
  const int64_t grad_stride = g.numel() == 1 ? 0 : 1;
  const Tensor n = count.defined() ? count.contiguous() : Tensor();
  const auto* count_ptr = n.defined() ? static_cast<const long long*>(n.data_ptr()) : nullptr;
  const CrossEntropyKernel form = cross_entropy_kernel();
  Tensor dx = empty({rows, cols}, x.dtype(), dev);
  if (dx.numel() == 0) return dx;
  dispatch_floating_device(x.dtype(), op, [&]<class T>() {
    using A = dacc_t<T>;
    dispatch_index(t.dtype(), op, [&]<class I>() {
      // Note [Unaligned rows]: vectors wherever every row of both sits at the same offset from a
      // boundary: the same offset at row 0, and row strides that keep it.
      const auto bytes = static_cast<uintptr_t>(x.element_size());
      const bool same_offset =
          reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == reinterpret_cast<uintptr_t>(dx.data_ptr()) % 16 &&
          (static_cast<uintptr_t>(ldx) * bytes) % 16 == (static_cast<uintptr_t>(cols) * bytes) % 16;
      with_vec<T>(same_offset, [&]<int V>() {
        const RowLaunch rl = row_launch(rows, cols, V);
        with_form(form, [&]<bool Fast>() {
          cross_entropy_backward_kernel<T, I, V, Fast><<<grid_of(rl), block_of(rl), 0, s>>>(
              ptr<T>(dx), ptr<const T>(x), ptr<const I>(t), ptr<const A>(l), ptr<const A>(g), count_ptr, grad_stride,
              rows, c, ldx, cols, cols, ignore_index, label_smoothing, scale);
        });
      });
    });
    KILN_CUDA_CHECK_LAUNCH();
  });
  return dx;
}

}  // namespace kiln::cuda
