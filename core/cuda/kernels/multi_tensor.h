// The host side of multi-tensor apply (torch's multi_tensor_apply): packing many tensors into the
// tables that one kernel launch each processes. No CUDA headers, so a CPU test can check the
// packing; the kernel side is core/cuda/multi_tensor.cuh.
#pragma once

#include <cstdint>

namespace kiln::cuda::mt {

constexpr int64_t kChunkSize = 65536;  // elements per block

// Note [Multi-tensor table]
// Block b of a launch processes elements [c * kChunkSize, min(numel[t], (c + 1) * kChunkSize)) of
// tensor t = block_tensor[b], c = block_chunk[b]; ptr[d][t] is the t-th tensor of list d (e.g.
// d = 0 params, 1 grads, 2 exp_avg, ...), all contiguous and numel[t] long. The table travels as a
// kernel argument (at most 4 KiB), so it holds at most kMaxTensors tensors and kMaxBlocks blocks;
// when either runs out the table is launched, and a tensor whose chunks did not all fit continues
// in the next table as its slot 0. Tensors with no elements get no slot. `Meta` carries
// per-tensor extras (a step counter, a flag).
template <int kDepth, class Meta, int kMaxTensors, int kMaxBlocks>
struct TensorTable {
  static_assert(kMaxTensors <= 256, "block_tensor is a uint8_t");
  static constexpr int depth = kDepth;
  static constexpr int max_tensors = kMaxTensors;
  static constexpr int max_blocks = kMaxBlocks;
  void* ptr[kDepth][kMaxTensors];
  int64_t numel[kMaxTensors];
  Meta meta[kMaxTensors];
  uint8_t block_tensor[kMaxBlocks];
  int32_t block_chunk[kMaxBlocks];  // chunk index: numel < 2^31 * kChunkSize
};

struct NoMeta {};

// Blocks (chunks) a tensor of n elements takes.
inline int64_t chunk_count(int64_t n) { return (n + kChunkSize - 1) / kChunkSize; }

// Packs `count` tensors into tables as Note [Multi-tensor table] says and calls flush(table,
// blocks) for each full table and the last one. numel(i) is tensor i's size; set(table, slot, i)
// writes ptr[*][slot] and meta[slot] for tensor i (numel[slot] is written here).
template <class Table, class NumelFn, class SetFn, class FlushFn>
void pack_and_flush(int64_t count, NumelFn numel, SetFn set, FlushFn flush) {
  Table table;
  int tensors = 0, blocks = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = numel(i);
    if (n == 0) continue;
    // Here tensors < max_tensors: a table whose last slot is taken is flushed at that tensor's
    // last chunk.
    set(table, tensors, i);
    table.numel[tensors] = n;
    ++tensors;
    const int64_t chunks = chunk_count(n);
    for (int64_t c = 0; c < chunks; ++c) {
      table.block_tensor[blocks] = static_cast<uint8_t>(tensors - 1);
      table.block_chunk[blocks] = static_cast<int32_t>(c);
      ++blocks;
      const bool last_chunk = c + 1 == chunks;
      if (blocks == Table::max_blocks || (tensors == Table::max_tensors && last_chunk)) {
        flush(table, blocks);
        blocks = 0;
        if (last_chunk) {
          tensors = 0;
        } else {  // the tensor goes on in the next table, from slot 0
          const int from = tensors - 1;
          for (int d = 0; d < Table::depth; ++d) table.ptr[d][0] = table.ptr[d][from];
          table.numel[0] = table.numel[from];
          table.meta[0] = table.meta[from];
          tensors = 1;
        }
      }
    }
  }
  if (blocks > 0) flush(table, blocks);
}

}  // namespace kiln::cuda::mt
