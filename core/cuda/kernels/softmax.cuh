// Device helpers of the row kernels (softmax.cu, layer_norm.cu, cross_entropy.cu): 16-byte packs,
// sums and online-softmax merges over the threads of one row (Note [Row launches] in row_math.h).
// Included only by .cu files.
#pragma once

#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/cuda/plan/row_math.h>

namespace kiln::cuda::rowwise {

// Elements of T in one 16-byte vector.
template <class T>
inline constexpr int kVec = static_cast<int>(16 / sizeof(T));

// p[0, V) converted to A; p is aligned to the pack (Note [Row launches]).
template <int V, class T, class A>
__device__ __forceinline__ void load_pack(const T* p, A (&out)[V]) {
  const Pack<T, V> k = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = static_cast<A>(load_acc(k.v[i]));
}

template <int V, class T, class A>
__device__ __forceinline__ void store_pack(T* p, const A (&in)[V]) {
  Pack<T, V> k;
#pragma unroll
  for (int i = 0; i < V; ++i) k.v[i] = store_as<T>(in[i]);
  *reinterpret_cast<Pack<T, V>*>(p) = k;
}

template <class A>
__device__ __forceinline__ A warp_sum_of(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sums each v[k] over the threads of one row; every one of them gets the totals, bitwise equal
// (xor butterflies add the same pairs on every lane). With blockDim.x == 32 the row is one warp
// (no barrier); otherwise the row is the whole block (blockDim.y == 1, blockDim.x a multiple of
// 32) and every thread of the block must call this. `scratch` holds 32 * K values.
template <int K, class A>
__device__ __forceinline__ void row_sum(A (&v)[K], A* scratch) {
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum_of(v[k]);
  if (blockDim.x == 32) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // scratch may still be read by the previous call
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) scratch[warp * K + k] = v[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum_of(lane < warps ? scratch[lane * K + k] : A(0));
}

template <class A>
__device__ __forceinline__ MaxSum<A> warp_max_sum(MaxSum<A> v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum<A> w;
    w.m = __shfl_xor_sync(0xffffffffu, v.m, o);
    w.s = __shfl_xor_sync(0xffffffffu, v.s, o);
    v = MaxSum<A>::merge(v, w);
  }
  return v;
}

// row_sum's rules for the online (max, sum) pair (Note [Online softmax]); scratch holds 64 values.
template <class A>
__device__ __forceinline__ MaxSum<A> row_max_sum(MaxSum<A> v, A* scratch) {
  v = warp_max_sum(v);
  if (blockDim.x == 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) {
    scratch[warp] = v.m;
    scratch[32 + warp] = v.s;
  }
  __syncthreads();
  MaxSum<A> w;  // empty lanes keep the identity (-inf, 0)
  if (lane < warps) {
    w.m = scratch[lane];
    w.s = scratch[32 + lane];
  }
  return warp_max_sum(w);
}

// Calls f.template operator()<V>() with V = kVec<T> when `vectorize`, else V = 1.
template <class T, class F>
void with_vec(bool vectorize, F&& f) {
  if (vectorize) f.template operator()<kVec<T>>();
  else f.template operator()<1>();
}

inline dim3 block_of(const RowLaunch& l) { return dim3(static_cast<unsigned>(l.block_x), static_cast<unsigned>(l.block_y)); }
inline dim3 grid_of(const RowLaunch& l) { return dim3(static_cast<unsigned>(l.grid)); }

// fn(base) for each column of an (outer, n, inner) tensor, one thread per column in a grid-stride
// loop (the kernels for a dim other than the last): the column's r-th element is base + r * inner.
template <class F>
__device__ __forceinline__ void for_each_column(int64_t outer, int64_t n, int64_t inner, F&& fn) {
  const int64_t columns = outer * inner;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < columns; c += step)
    fn((c / inner) * n * inner + c % inner);
}

}  // namespace kiln::cuda::rowwise
