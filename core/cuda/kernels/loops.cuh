// The CUDA elementwise engine (the GPU twin of core/cpu/loops.h): out[i] = op(in[i]...) over N
// operands that share one logical shape, each with its own strides (0 for a broadcast dim) and
// offset. Contiguous operands take a flat grid-stride loop with 16-byte vector loads; anything
// else goes through an OffsetCalculator (core/cuda/plan/elementwise_offsets.h). CUDA-only header.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/cuda/plan/elementwise_offsets.h>

namespace kiln::cuda {

// Operand base pointers; operand 0 is the output.
template <int N>
struct Pointers {
  char* p[N];
};

// V elements of T moved as one aligned load/store.
template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <class... T>
inline constexpr size_t kMaxSizeOf = std::max({sizeof(T)...});

// Elements per vector for a map over Out, In...: 16 bytes of the widest type.
template <class Out, class... In>
inline constexpr int kVecWidth = static_cast<int>(16 / kMaxSizeOf<Out, In...>);

// op applied to one element at per-operand element offsets.
template <class Out, class... In, class Op, size_t... K>
__device__ __forceinline__ void map_one(const Pointers<sizeof...(In) + 1>& p, const int64_t* off, const Op& op,
                                        std::index_sequence<K...>) {
  reinterpret_cast<Out*>(p.p[0])[off[0]] =
      store_as<Out>(op(load_acc(reinterpret_cast<const In*>(p.p[K + 1])[off[K + 1]])...));
}

// op applied to V consecutive elements; the inputs arrive by value (one vector load each).
template <class Out, int V, class Op, class... VecIn>
__device__ __forceinline__ Vec<Out, V> map_vec(const Op& op, VecIn... in) {
  Vec<Out, V> r;
  KILN_UNROLL
  for (int j = 0; j < V; ++j) r.v[j] = store_as<Out>(op(load_acc(in.v[j])...));
  return r;
}

// Flat loop over n elements of contiguous operands: vector j covers elements [j V, j V + V); the
// n % V tail elements go to the first threads of the grid. Every pointer is aligned to its vector.
template <int V, class Out, class... In, class Op, size_t... K>
__device__ __forceinline__ void contiguous_body(Pointers<sizeof...(In) + 1> p, int64_t n, const Op& op,
                                                std::index_sequence<K...> ks) {
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t nthreads = int64_t(gridDim.x) * blockDim.x;
  const int64_t nvec = n / V;
  Vec<Out, V>* out = reinterpret_cast<Vec<Out, V>*>(p.p[0]);
  for (int64_t j = tid; j < nvec; j += nthreads)
    out[j] = map_vec<Out, V>(op, reinterpret_cast<const Vec<In, V>*>(p.p[K + 1])[j]...);
  if constexpr (V > 1) {
    const int64_t t = nvec * V + tid;
    if (t < n) {
      int64_t off[sizeof...(In) + 1];
      KILN_UNROLL
      for (int k = 0; k <= int(sizeof...(In)); ++k) off[k] = t;
      map_one<Out, In...>(p, off, op, ks);
    }
  }
}

// (A __global__ template's parameter pack must come last.)
template <int V, class Op, class Out, class... In>
__global__ void contiguous_map_kernel(Pointers<sizeof...(In) + 1> p, int64_t n, Op op) {
  contiguous_body<V, Out, In...>(p, n, op, std::index_sequence_for<In...>{});
}

// Any strides: a grid-stride loop over a piece of fewer than 2^31 elements.
template <class Op, class Out, class... In>
__global__ void strided_map_kernel(Pointers<sizeof...(In) + 1> p, OffsetCalculator<sizeof...(In) + 1> calc,
                                   int64_t n, Op op) {
  const int64_t nthreads = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += nthreads) {
    const Offsets<sizeof...(In) + 1> o = calc.get(static_cast<uint32_t>(i));
    map_one<Out, In...>(p, o.v, op, std::index_sequence_for<In...>{});
  }
}

inline bool aligned_to(const void* ptr, size_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

// out[i] = op(ins[k][i]...), i over out's shape. Out and In... are the storage (device) types of
// the tensors; `op` takes and returns compute types (dacc_t), so 16-bit floats are computed in
// float and rounded once. Every input already has out's shape (broadcast with Tensor::expand),
// any strides and offset; out may be one of the inputs (in place: element i is read and written
// by the same thread). Runs on out's device, current stream.
template <class Out, class... In, class Op>
void launch_map(const Tensor& out, const std::array<const Tensor*, sizeof...(In)>& ins, const Op& op) {
  constexpr int N = sizeof...(In) + 1;
  const int64_t n = out.numel();
  if (n == 0) return;
  std::array<const Tensor*, N> all;
  all[0] = &out;
  for (int k = 1; k < N; ++k) all[k] = ins[k - 1];
  std::array<std::vector<int64_t>, N> strides;
  for (int k = 0; k < N; ++k) {
    KILN_ASSERT(all[k]->shape() == out.shape(), "launch_map: operand ", k, " has shape ", all[k]->shape(),
                ", loop shape ", out.shape());
    KILN_ASSERT(all[k]->device() == out.device(), "launch_map: operand ", k, " is on ", all[k]->device(),
                ", output on ", out.device());
    strides[k] = all[k]->strides();
  }
  const Loop<N> loop = coalesce<N>(out.shape(), strides);

  cudaStream_t stream = stream_for(out);
  Pointers<N> p;
  for (int k = 0; k < N; ++k) p.p[k] = static_cast<char*>(all[k]->data_ptr());

  if (loop.contiguous()) {
    constexpr int V = kVecWidth<Out, In...>;
    bool vec = V > 1 && aligned_to(p.p[0], V * sizeof(Out));
    {
      int k = 1;
      ((vec = vec && aligned_to(p.p[k++], V * sizeof(In))), ...);
    }
    if (vec) {
      contiguous_map_kernel<V, Op, Out, In...><<<blocks_for(ceil_div(n, V)), kThreads, 0, stream>>>(p, n, op);
      KILN_CUDA_CHECK_LAUNCH();
      return;
    }
    // Misaligned views (x[1:]) fall through to the strided kernel over one dim.
  }

  // Pieces of < 2^31 elements and <= kMaxLoopDims dims (Note [32-bit pieces]).
  const size_t sizes[N] = {sizeof(Out), sizeof(In)...};
  for_each_piece<N>(loop, [&](const Loop<N>& piece, const std::array<int64_t, N>& base) {
    Pointers<N> q;
    for (int k = 0; k < N; ++k) q.p[k] = p.p[k] + base[k] * static_cast<int64_t>(sizes[k]);
    const int64_t m = piece.numel();
    const OffsetCalculator<N> calc = make_offset_calculator<N>(piece);
    strided_map_kernel<Op, Out, In...><<<blocks_for(m), kThreads, 0, stream>>>(q, calc, m, op);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

// A scalar's value as the CPU front sees it: converted to T (as scalar_tensor(value, dtype) does,
// rounding 16-bit floats and truncating integers) and loaded back as the compute type.
template <class T>
dacc_t<device_t<T>> scalar_as(double value) {
  const T stored = static_cast<T>(formulas::convert<acc_t<T>>(value));  // Note [Conversion to u8]
  return static_cast<dacc_t<device_t<T>>>(static_cast<acc_t<T>>(stored));
}

}  // namespace kiln::cuda
