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

// max that lets NaN win (torch.max), for the infinity norm.
template <class T>
__device__ __forceinline__ T nan_max(T a, T b) {
  return (a != a || a > b) ? a : b;
}

// Block-wide reductions in double (blockDim.x a multiple of 32); every thread gets the result.
// `scratch` holds 32 doubles.
template <bool kMax>
__device__ __forceinline__ double block_reduce_double(double v, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const double other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? nan_max(v, other) : v + other;
  }
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0;  // 0 is neutral for sums and for maxima of |x|
  for (int o = 16; o > 0; o >>= 1) {
    const double other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? nan_max(v, other) : v + other;
  }
  return v;
}

}  // namespace kiln::cuda::mt
