// CUDA reductions over a planned (outer, n, inner) problem: sums (sum, mean, the means of var), the
// squared deviations of var/std, and max/min with positions. Three kernels (short rows, long rows,
// columns) run any reduction "op"; see Note [CUDA reductions] in reduce_plan.h for their shapes and
// why the results are deterministic.
#include <kiln/core/cuda/kernels/reduce.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/cuda/plan/reduce_plan.h>
#include <kiln/cuda.h>

namespace kiln::cuda {

namespace {

using reduction::Best;
using reduction::Cols;
using reduction::kColThreads;
using reduction::kRowThreads;
using reduction::kShortRow;
using reduction::kShortRowThreads;
using reduction::LongRows;
using reduction::ShortRows;

// A reduction op: `acc` is what it accumulates; load(v, r, k) turns the value at position r (along
// n) of output k into an acc; combine(a, b) merges a (earlier) with b; store(k, a) writes output k.

template <class T>
inline constexpr bool is_float_like =
    std::is_floating_point_v<T> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <class A, class T>
__device__ __forceinline__ A to_acc(T v) {
  if constexpr (std::is_same_v<T, bool>) return v ? A(1) : A(0);
  else return static_cast<A>(load_acc(v));
}

// scale * sum of the values as A, written as Out: sum, mean, the means of var, integer sums.
template <class T, class A, class Out>
struct SumOp {
  using acc = A;
  Out* out;  // (outputs,)
  A scale;
  __device__ A identity() const { return A(0); }
  __device__ A load(T v, int64_t, int64_t) const { return to_acc<A>(v); }
  __device__ A combine(A a, A b) const { return a + b; }
  __device__ void store(int64_t k, A a) const { out[k] = store_as<Out>(a * scale); }
};

// scale * sum of (x - mean[k])^2, square-rooted for std: the second pass of var/std.
template <class T, class A>
struct SquaredDeviationOp {
  using acc = A;
  T* out;         // (outputs,)
  const A* mean;  // (outputs,)
  A scale;
  bool take_sqrt;
  __device__ A identity() const { return A(0); }
  __device__ A load(T v, int64_t, int64_t k) const {
    const A d = to_acc<A>(v) - mean[k];
    return d * d;
  }
  __device__ A combine(A a, A b) const { return a + b; }
  __device__ void store(int64_t k, A a) const {
    A v = a * scale;
    if (take_sqrt) {
      if constexpr (std::is_same_v<A, float>) v = sqrtf(v);
      else v = ::sqrt(v);
    }
    out[k] = store_as<T>(v);
  }
};

// max (Max) or min with its position; 16-bit values compare as float (exactly).
template <bool Max, class T>
struct ExtremumOp {
  using C = dacc_t<T>;
  using acc = Best<C>;
  T* values;         // (outputs,) or nullptr
  int64_t* indices;  // (outputs,) or nullptr
  __device__ acc identity() const { return {C(0), -1}; }
  __device__ acc load(T v, int64_t r, int64_t) const { return {load_acc(v), r}; }
  __device__ acc combine(acc a, acc b) const { return reduction::better<Max>(a, b); }
  __device__ void store(int64_t k, acc a) const {
    if (values) values[k] = store_as<T>(a.value);
    if (indices) indices[k] = a.index;
  }
};

// Reduces accumulators an earlier pass wrote (one per chunk) with Op's combine and store.
template <class Op>
struct Partials {
  using acc = typename Op::acc;
  Op op;
  __device__ acc identity() const { return op.identity(); }
  __device__ acc load(acc v, int64_t, int64_t) const { return v; }
  __device__ acc combine(acc a, acc b) const { return op.combine(a, b); }
  __device__ void store(int64_t k, acc a) const { op.store(k, a); }
};
// The op of the next pass: partials of partials are still partials (so the recursion is finite).
template <class Op>
Partials<Op> next_pass(const Op& op) { return {op}; }
template <class Op>
Partials<Op> next_pass(const Partials<Op>& op) { return op; }

// --- shuffles --------------------------------------------------------------------------------
template <class V>
__device__ __forceinline__ V shfl_xor(V v, int o) {
  if constexpr (sizeof(V) < 4) return static_cast<V>(__shfl_xor_sync(0xffffffffu, static_cast<int>(v), o));
  else if constexpr (std::is_integral_v<V> && sizeof(V) == 8)
    return static_cast<V>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(v), o));
  else return __shfl_xor_sync(0xffffffffu, v, o);
}
template <class C>
__device__ __forceinline__ Best<C> shfl_xor(Best<C> v, int o) {
  return {shfl_xor(v.value, o), shfl_xor(v.index, o)};
}

// The block's result in thread 0 (blockDim.x a multiple of 32, one dimension). warp_acc: 32 slots.
template <class Op, class A>
__device__ A block_reduce(const Op& op, A a, A* warp_acc) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) a = op.combine(a, shfl_xor(a, o));
  if (lane == 0) warp_acc[warp] = a;
  __syncthreads();
  if (warp == 0) {
    a = lane < warps ? warp_acc[lane] : op.identity();
    for (int o = 16; o > 0; o >>= 1) a = op.combine(a, shfl_xor(a, o));
  }
  return a;
}

// --- kernels ---------------------------------------------------------------------------------
// Rows of n <= kShortRow values; a group of p.group lanes per row.
template <class Op, class In>
__global__ void __launch_bounds__(kShortRowThreads)
    short_rows_kernel(Op op, const In* in, int64_t rows, int64_t n, ShortRows p) {  // in: (rows, n)
  int64_t row;
  int lane;
  reduction::short_row_of(p, blockIdx.x, threadIdx.x, row, lane);
  typename Op::acc a = op.identity();
  if (row < rows) {
    const In* r = in + row * n;
    for (int64_t j = lane; j < n; j += p.group) a = op.combine(a, op.load(r[j], j, row));
  }
  // Every lane takes part in the shuffles; xor with o < group stays inside the group.
  for (int o = p.group / 2; o > 0; o >>= 1) a = op.combine(a, shfl_xor(a, o));
  if (row < rows && lane == 0) op.store(row, a);
}

// One chunk of one long row per block; `partial` (rows, chunks) is null when a chunk is a row.
template <class Op, class In>
__global__ void __launch_bounds__(kRowThreads)
    long_rows_kernel(Op op, const In* in, int64_t n, LongRows p, typename Op::acc* partial) {  // in: (rows, n)
  using A = typename Op::acc;
  __shared__ A warp_acc[kRowThreads / 32];
  int64_t row, chunk, begin, end;
  reduction::long_row_of(p, blockIdx.x, n, row, chunk, begin, end);
  const In* r = in + row * n;
  constexpr int64_t S = kRowThreads;
  A a = op.identity();
  int64_t j = begin + threadIdx.x;
  for (; j + 3 * S < end; j += 4 * S) {  // four loads in flight, combined in order
    const In v0 = r[j], v1 = r[j + S], v2 = r[j + 2 * S], v3 = r[j + 3 * S];
    a = op.combine(a, op.load(v0, j, row));
    a = op.combine(a, op.load(v1, j + S, row));
    a = op.combine(a, op.load(v2, j + 2 * S, row));
    a = op.combine(a, op.load(v3, j + 3 * S, row));
  }
  for (; j < end; j += S) a = op.combine(a, op.load(r[j], j, row));
  a = block_reduce(op, a, warp_acc);
  if (threadIdx.x == 0) {
    if (partial) partial[blockIdx.x] = a;  // blockIdx.x == row * chunks + chunk
    else op.store(row, a);
  }
}

// p.x threads by p.y row stripes per block, each thread V adjacent columns; `partial` (outer,
// chunks, inner) is null when one chunk covers the column. V > 1 only where inner % V == 0 and
// `in` is aligned to V values (the driver checks).
template <class Op, class In, int V>
__global__ void __launch_bounds__(kColThreads)
    cols_kernel(Op op, const In* in, int64_t n, int64_t inner, Cols p, typename Op::acc* partial) {  // in: (outer, n, inner)
  using A = typename Op::acc;
  __shared__ A stripe[kColThreads * V];  // (y, x, V)
  int64_t o, col0, chunk, begin, end;
  reduction::col_block_of(p, blockIdx.x, n, o, col0, chunk, begin, end);
  const int x = threadIdx.x, y = threadIdx.y;
  const int64_t i = col0 + int64_t{x} * V, k = o * inner + i;
  A a[V];
#pragma unroll
  for (int j = 0; j < V; ++j) a[j] = op.identity();
  if (i < inner) {
    const In* col = in + o * n * inner + i;
    auto row = [&](int64_t r) { return *reinterpret_cast<const Pack<In, V>*>(col + r * inner); };
    auto add = [&](const Pack<In, V>& v, int64_t r) {
#pragma unroll
      for (int j = 0; j < V; ++j) a[j] = op.combine(a[j], op.load(v.v[j], r, k + j));
    };
    const int64_t S = p.y;
    int64_t r = begin + y;
    for (; r + 3 * S < end; r += 4 * S) {
      const Pack<In, V> v0 = row(r), v1 = row(r + S), v2 = row(r + 2 * S), v3 = row(r + 3 * S);
      add(v0, r);
      add(v1, r + S);
      add(v2, r + 2 * S);
      add(v3, r + 3 * S);
    }
    for (; r < end; r += S) add(row(r), r);
  }
  // Tree over y: in the step of stride s, stripes y < s read stripes [s, 2s) and write [0, s).
  A* mine = stripe + (y * p.x + x) * V;
#pragma unroll
  for (int j = 0; j < V; ++j) mine[j] = a[j];
  for (int s = p.y / 2; s > 0; s >>= 1) {
    __syncthreads();
    if (y < s) {
      const A* other = stripe + ((y + s) * p.x + x) * V;
#pragma unroll
      for (int j = 0; j < V; ++j) mine[j] = a[j] = op.combine(a[j], other[j]);
    }
  }
  if (y == 0 && i < inner) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (partial) partial[(o * p.chunks + chunk) * inner + i + j] = a[j];
      else op.store(k + j, a[j]);
    }
  }
}

// --- drivers ---------------------------------------------------------------------------------
void check_grid(int64_t blocks, const char* what) {
  KILN_CHECK(blocks <= INT_MAX, "reduction: ", what, " needs ", blocks, " blocks, more than a CUDA grid holds");
}

// A scratch buffer of `count` accumulators on `device` (a Tensor, so the device allocator serves it).
template <class A>
Tensor scratch_for(int64_t count, Device device) {
  return empty({count * static_cast<int64_t>(sizeof(A))}, DType::u8, device);
}

template <class Op, class In>
void reduce_rows(const Op& op, const In* in, int64_t rows, int64_t n, Device device, cudaStream_t s) {
  using A = typename Op::acc;
  if (n <= kShortRow) {
    const ShortRows p = reduction::plan_short_rows(rows, n);
    check_grid(p.blocks, "a row reduction");
    short_rows_kernel<<<static_cast<unsigned>(p.blocks), kShortRowThreads, 0, s>>>(op, in, rows, n, p);
    KILN_CUDA_CHECK_LAUNCH();
    return;
  }
  const LongRows p = reduction::plan_long_rows(rows, n);
  check_grid(p.blocks, "a row reduction");
  if (p.chunks == 1) {
    long_rows_kernel<<<static_cast<unsigned>(p.blocks), kRowThreads, 0, s>>>(op, in, n, p, nullptr);
    KILN_CUDA_CHECK_LAUNCH();
    return;
  }
  Tensor scratch = scratch_for<A>(p.blocks, device);  // (rows, chunks); freed in stream order
  A* part = static_cast<A*>(scratch.data_ptr());
  long_rows_kernel<<<static_cast<unsigned>(p.blocks), kRowThreads, 0, s>>>(op, in, n, p, part);
  KILN_CUDA_CHECK_LAUNCH();
  reduce_rows(next_pass(op), static_cast<const A*>(part), rows, p.chunks, device, s);
}

// The widest vector a column thread may read (Note [Vector columns]): 16 bytes of In, as long as
// a block's accumulators (kColThreads * V of A) fit in 32 KiB of shared memory.
template <class In, class A>
constexpr int max_column_vector() {
  return std::min<int>(16 / static_cast<int>(sizeof(In)), 32 * 1024 / (kColThreads * static_cast<int>(sizeof(A))));
}

// That width where the switch is on (vector_column_reductions), inner is a multiple of it and `in`
// is aligned to it; else 1.
template <class In, class A>
int column_vector(const In* in, int64_t inner) {
  constexpr int v = max_column_vector<In, A>();
  if (v < 2 || !is_float_like<In> || !vector_column_reductions()) return 1;
  if (inner % v != 0 || reinterpret_cast<uintptr_t>(in) % (sizeof(In) * v) != 0) return 1;
  return v;
}

template <class Op, class In, int V>
void launch_cols(const Op& op, const In* in, int64_t n, int64_t inner, const Cols& p, typename Op::acc* part,
                 cudaStream_t s) {
  const dim3 block(static_cast<unsigned>(p.x), static_cast<unsigned>(p.y));
  cols_kernel<Op, In, V><<<static_cast<unsigned>(p.blocks), block, 0, s>>>(op, in, n, inner, p, part);
  KILN_CUDA_CHECK_LAUNCH();
}

template <class Op, class In>
void reduce_cols(const Op& op, const In* in, int64_t outer, int64_t n, int64_t inner, Device device,
                 cudaStream_t s) {
  using A = typename Op::acc;
  const int vec = column_vector<In, A>(in, inner);
  const Cols p = reduction::plan_cols(outer, n, inner, vec);
  check_grid(p.blocks, "a column reduction");
  Tensor scratch;
  A* part = nullptr;
  if (p.chunks > 1) {
    scratch = scratch_for<A>(outer * p.chunks * inner, device);  // (outer, chunks, inner)
    part = static_cast<A*>(scratch.data_ptr());
  }
  constexpr int kV = max_column_vector<In, A>();
  if constexpr (kV >= 2 && is_float_like<In>) {  // integer and bool reductions keep one form
    if (vec == kV) launch_cols<Op, In, kV>(op, in, n, inner, p, part, s);
    else launch_cols<Op, In, 1>(op, in, n, inner, p, part, s);
  } else {
    launch_cols<Op, In, 1>(op, in, n, inner, p, part, s);
  }
  if (part) reduce_cols(next_pass(op), static_cast<const A*>(part), outer, p.chunks, inner, device, s);
}

// Runs `op` over src read as (outer, n, inner) of In.
template <class In, class Op>
void run(const Op& op, const Tensor& src, int64_t outer, int64_t n, int64_t inner) {
  if (outer * inner == 0) return;
  cudaStream_t s = stream_for(src);
  const In* in = static_cast<const In*>(src.data_ptr());
  if (inner == 1) reduce_rows(op, in, outer, n, src.device(), s);
  else reduce_cols(op, in, outer, n, inner, src.device(), s);
}

void check_out(const char* op, const Tensor& out, int64_t count, DType dtype, const Tensor& src) {
  KILN_ASSERT(out.device() == src.device() && out.is_contiguous() && out.numel() == count && out.dtype() == dtype,
              op, ": reduction output of shape ", out.shape(), " (", out.dtype(), ") does not fit ", count,
              " outputs of ", dtype);
}

}  // namespace

void sum_reduce(const char* op, const Tensor& src, int64_t outer, int64_t n, int64_t inner, double scale,
                const Tensor& out) {
  dispatch_floating_device(src.dtype(), op, [&]<class T>() {
    using A = dacc_t<T>;
    check_out(op, out, outer * inner, src.dtype(), src);
    run<T>(SumOp<T, A, T>{ptr<T>(out), static_cast<A>(scale)}, src, outer, n, inner);
  });
}

void integer_sum_reduce(const char* op, const Tensor& src, int64_t outer, int64_t n, int64_t inner,
                        const Tensor& out) {
  KILN_ASSERT(!is_floating(src.dtype()), op, ": integer_sum_reduce of a ", src.dtype(), " tensor");
  check_out(op, out, outer * inner, DType::i64, src);
  dispatch_all_device(src.dtype(), op, [&]<class T>() {
    if constexpr (!is_float_like<T>)
      run<T>(SumOp<T, int64_t, int64_t>{ptr<int64_t>(out), int64_t(1)}, src, outer, n, inner);
  });
}

void var_reduce(const char* op, const Tensor& src, int64_t outer, int64_t n, int64_t inner, int64_t correction,
                bool take_sqrt, const Tensor& out) {
  dispatch_floating_device(src.dtype(), op, [&]<class T>() {
    using A = dacc_t<T>;
    check_out(op, out, outer * inner, src.dtype(), src);
    Tensor mean = empty({outer * inner}, sizeof(A) == 8 ? DType::f64 : DType::f32, src.device());
    run<T>(SumOp<T, A, A>{ptr<A>(mean), static_cast<A>(1.0 / static_cast<double>(n))}, src, outer, n, inner);
    const double scale = 1.0 / static_cast<double>(std::max<int64_t>(n - correction, 0));
    run<T>(SquaredDeviationOp<T, A>{ptr<T>(out), ptr<A>(mean), static_cast<A>(scale), take_sqrt}, src, outer, n,
           inner);
  });
}

void extremum_reduce(const char* op, const Tensor& src, int64_t outer, int64_t n, int64_t inner, bool max,
                     const Tensor& values, const Tensor& indices) {
  KILN_ASSERT(n >= 1, op, ": max/min over an empty dim");
  dispatch_numeric_device(src.dtype(), op, [&]<class T>() {
    if (values.defined()) check_out(op, values, outer * inner, src.dtype(), src);
    if (indices.defined()) check_out(op, indices, outer * inner, DType::i64, src);
    T* v = values.defined() ? ptr<T>(values) : nullptr;
    int64_t* ix = indices.defined() ? ptr<int64_t>(indices) : nullptr;
    if (max) run<T>(ExtremumOp<true, T>{v, ix}, src, outer, n, inner);
    else run<T>(ExtremumOp<false, T>{v, ix}, src, outer, n, inner);
  });
}

}  // namespace kiln::cuda
