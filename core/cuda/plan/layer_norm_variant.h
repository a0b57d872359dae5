// What a layer-norm variant (cuda::LayerNormVariant, kiln/cuda.h) means for the CUDA kernels'
// launches (layer_norm.cu), as plain functions CPU code can include (no CUDA headers), and the
// candidates bench_cuda --sweep times. tests/core/test_layer_norm_variant.cpp checks them on the CPU.
#pragma once

#include <cstdint>
#include <vector>

#include <kiln/core/cuda/plan/row_math.h>
#include <kiln/cuda.h>  // LayerNormVariant, Note [Layer norm variants]

namespace kiln::cuda {

// Elements per access for elements of `elem_size` bytes: 16 / elem_size, 8 / elem_size or 1.
inline int layer_norm_vec(const LayerNormVariant& v, size_t elem_size) {
  const int n = v.vec_bytes / static_cast<int>(elem_size);
  return n > 1 ? n : 1;
}

inline rowwise::RowLaunch layer_norm_forward_launch(const LayerNormVariant& v, int64_t rows, int64_t n, int vec) {
  using namespace rowwise;
  RowLaunch l = row_launch(rows, n, vec);
  if (v.fwd_rows == LayerNormVariant::Rows::warp && l.block_x != 32) {
    l.block_x = 32;
    l.block_y = kWarpRows;
    l.grid = capped_grid((rows + kWarpRows - 1) / kWarpRows);
  } else if (v.fwd_rows == LayerNormVariant::Rows::block && l.block_x == 32 && l.block_y != 1) {
    l.block_x = block_row_threads(n, vec);
    l.block_y = 1;
    l.grid = capped_grid(rows);
  }
  return l;
}

inline rowwise::RowSplit layer_norm_backward_split(const LayerNormVariant& v, int64_t rows) {
  return rowwise::split_rows(rows, v.bwd_blocks);
}

// Whether the backward keeps `bytes` of partials per block in shared memory.
inline bool layer_norm_partials_in_shared(const LayerNormVariant& v, size_t bytes, size_t max_shared) {
  if (v.bwd_partials == LayerNormVariant::Partials::global) return false;
  return bytes <= max_shared;  // automatic and shared alike: only where they fit
}

// The forward candidates (vec x fwd) and the backward candidates (vec x bwd_blocks x partials, and
// the split form at several block counts) a sweep times; each list starts with the default.
inline std::vector<LayerNormVariant> layer_norm_forward_sweep() {
  std::vector<LayerNormVariant> out{LayerNormVariant{}};
  for (int vec : {16, 8, 0})
    for (auto rows : {LayerNormVariant::Rows::automatic, LayerNormVariant::Rows::warp, LayerNormVariant::Rows::block}) {
      LayerNormVariant v;
      v.vec_bytes = vec;
      v.fwd_rows = rows;
      if (!(v == LayerNormVariant{})) out.push_back(v);
    }
  return out;
}

// `sms`: the device's multiprocessors; block counts are multiples of it, and 1024.
inline std::vector<LayerNormVariant> layer_norm_backward_sweep(int sms) {
  std::vector<LayerNormVariant> out{LayerNormVariant{}};
  const int64_t s = sms > 0 ? sms : 132;
  for (int vec : {16, 8})
    for (int64_t blocks : {s, 2 * s, 4 * s, int64_t(1024), 8 * s})
      for (auto parts : {LayerNormVariant::Partials::automatic, LayerNormVariant::Partials::global}) {
        LayerNormVariant v;
        v.vec_bytes = vec;
        v.bwd_blocks = blocks;
        v.bwd_partials = parts;
        v.bwd = LayerNormVariant::Backward::fused;
        if (!(v == LayerNormVariant{})) out.push_back(v);
      }
  for (int64_t blocks : {s, 2 * s, 4 * s, 8 * s}) {  // the split form (its partials are global)
    LayerNormVariant v;
    v.bwd = LayerNormVariant::Backward::split;
    v.bwd_blocks = blocks;
    if (!(v == LayerNormVariant{})) out.push_back(v);
  }
  return out;
}

}  // namespace kiln::cuda
