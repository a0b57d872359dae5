// The kernel side of multi-tensor apply (torch's multi_tensor_apply): one launch processes many
// tensors, every block one chunk of one tensor (Note [Multi-tensor table] in multi_tensor.h, which
// also packs the tables). Included only by .cu files.
#pragma once

#include <cstdint>

#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/cuda/kernels/multi_tensor.h>

namespace kiln::cuda::mt {

constexpr int kBlockThreads = 512;
constexpr int kILP = 4;  // elements each thread loads before it computes (loads in flight)
// Kernel arguments must fit in 4 KiB (the portable limit); a table and its op stay below this.
constexpr size_t kMaxArgBytes = 4000;

// What a table's slot t covers for the block running it.
struct ChunkRange {
  int t;          // slot
  int64_t begin;  // first element
  int64_t end;    // one past the last
};

__device__ __forceinline__ ChunkRange chunk_range_of_block(const uint8_t* block_tensor, const int32_t* block_chunk,
                                                           const int64_t* numel) {
  const int t = block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(block_chunk[blockIdx.x]) * kChunkSize;
  const int64_t end = begin + kChunkSize < numel[t] ? begin + kChunkSize : numel[t];
  return {t, begin, end};
}

// Every block calls op(table, range); `op` holds the launch's scalars. Both arrive as kernel
// arguments (__grid_constant__: read in place, never copied to local memory).
template <class Table, class Op>
__global__ void __launch_bounds__(kBlockThreads) apply_kernel(const __grid_constant__ Table table,
                                                              const __grid_constant__ Op op) {
  op(table, chunk_range_of_block(table.block_tensor, table.block_chunk, table.numel));
}

template <class Table, class Op>
void launch(const Table& table, int blocks, const Op& op, cudaStream_t stream) {
  static_assert(sizeof(Table) + sizeof(Op) <= kMaxArgBytes, "kernel arguments over 4 KiB: shrink the table");
  apply_kernel<Table, Op><<<blocks, kBlockThreads, 0, stream>>>(table, op);
  KILN_CUDA_CHECK_LAUNCH();
}

// Walks a block's chunk with kILP elements per thread in flight: for each group of
// blockDim.x * kILP elements, every thread first calls load(k, i) for its elements k = 0..kILP-1
// that lie in the chunk (i the element index), then compute(k, i) for the same ones. The callers
// keep their per-element registers in arrays of kILP indexed by k (the loops are unrolled, so the
// arrays stay in registers).
template <class Load, class Compute>
__device__ __forceinline__ void for_each_ilp(ChunkRange r, Load&& load, Compute&& compute) {
  for (int64_t base = r.begin; base < r.end; base += static_cast<int64_t>(blockDim.x) * kILP) {
#pragma unroll
    for (int k = 0; k < kILP; ++k) {
      const int64_t i = base + threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (i < r.end) load(k, i);
    }
#pragma unroll
    for (int k = 0; k < kILP; ++k) {
      const int64_t i = base + threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (i < r.end) compute(k, i);
    }
  }
}

// max that lets NaN win (torch.max), for the infinity norm.
template <class T>
__device__ __forceinline__ T nan_max(T a, T b) {
  return (a != a || a > b) ? a : b;
}

// Block-wide sum or NaN-propagating maximum in double (blockDim.x a multiple of 32); every thread
// gets the result. `scratch` holds 32 doubles. 0 is neutral for sums and for maxima of |x|.
struct NanMax {
  __device__ __forceinline__ double operator()(double a, double b) const { return nan_max(a, b); }
};
template <bool kMax>
__device__ __forceinline__ double block_reduce_double(double v, double* scratch) {
  if constexpr (kMax) return block_reduce(v, scratch, 0.0, NanMax{});
  else return block_reduce(v, scratch, 0.0, Plus{});
}

}  // namespace kiln::cuda::mt
