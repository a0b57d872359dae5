// The launch configurations of the CUDA layer-norm kernels (layer_norm.cu) that a run can choose
// (KILN_LAYER_NORM_VARIANT, cuda::set_layer_norm_variant in kiln/cuda.h), as plain functions CPU
// code can include (no CUDA headers). bench_cuda --sweep times every candidate of
// layer_norm_sweep() on the GPU and prints the fastest; tests/core/test_layer_norm_variant.cpp
// checks the parsing and launch shapes on the CPU.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/core/cuda/plan/row_math.h>
#include <kiln/core/error.h>

namespace kiln::cuda {

// Note [Layer norm variants]
// What is unknown about the layer-norm kernels until a GPU times them, each a field:
// - vec_bytes: the width of each load and store, 16 (a 16-byte vector: 8 bf16, 4 f32), 8 (half
//   that) or 0 (one element). Wider vectors need fewer instructions; narrower ones spread a short
//   row over more threads. Vectors are used only where the row length and pointers allow
//   (can_vectorize); elsewhere the kernels go element by element whatever the variant says.
// - fwd_rows: the forward's launch: one warp per row (4 rows per block), one block per row, or
//   automatic (a warp up to kWarpRowMax values, a block beyond: Note [Row launches]).
// - bwd_blocks: the backward's blocks (each sums its rows' dγ/dβ partials, a second kernel adds
//   the partials): more blocks, more parallel rows, more partials to add.
// - bwd_partials: where a block keeps its partials while it runs: shared memory (when they fit in
//   46 KiB) or global memory.
// Every variant computes the same sums in the same order per row: the forward's output, mean and
// rstd do not depend on the variant except through the warp/block reduction tree, and the
// backward's per-row sums likewise; dγ/dβ add the same rows in a different grouping. The GPU test
// compares every variant of layer_norm_sweep() with the CPU.
struct LayerNormVariant {
  enum class Rows { automatic, warp, block };
  enum class Partials { automatic, shared, global };
  int vec_bytes = 16;
  Rows fwd_rows = Rows::automatic;
  int64_t bwd_blocks = rowwise::kMaxPartials;  // row_math.h: 1024
  Partials bwd_partials = Partials::automatic;
  bool operator==(const LayerNormVariant&) const = default;
};

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

inline std::string layer_norm_variant_name(const LayerNormVariant& v) {
  auto rows = [](LayerNormVariant::Rows r) {
    return r == LayerNormVariant::Rows::warp ? "warp" : r == LayerNormVariant::Rows::block ? "block" : "auto";
  };
  auto parts = [](LayerNormVariant::Partials p) {
    return p == LayerNormVariant::Partials::shared ? "shared" : p == LayerNormVariant::Partials::global ? "global" : "auto";
  };
  std::ostringstream os;
  os << "vec=" << v.vec_bytes << ",fwd=" << rows(v.fwd_rows) << ",bwd_blocks=" << v.bwd_blocks
     << ",partials=" << parts(v.bwd_partials);
  return os.str();
}

// "" or "default": the defaults. Otherwise comma-separated key=value pairs, any subset, in any
// order: vec=16|8|0, fwd=auto|warp|block, bwd_blocks=1..65535, partials=auto|shared|global (the
// form layer_norm_variant_name prints). Anything else is a ValueError naming the text.
inline LayerNormVariant parse_layer_norm_variant(std::string_view text) {
  LayerNormVariant v;
  if (text.empty() || text == "default") return v;
  const std::string all(text);
  auto bad = [&](std::string_view why) {
    KILN_FAIL_VALUE("KILN_LAYER_NORM_VARIANT '", all, "': ", why, " (expected e.g. vec=16,fwd=auto,bwd_blocks=1024,",
                    "partials=auto; vec 16|8|0, fwd auto|warp|block, bwd_blocks 1..65535, partials auto|shared|global)");
  };
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) bad("'" + std::string(item) + "' is not key=value");
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "vec") {
      if (value == "16") v.vec_bytes = 16;
      else if (value == "8") v.vec_bytes = 8;
      else if (value == "0") v.vec_bytes = 0;
      else bad("vec must be 16, 8 or 0 (bytes per access; 0: one element)");
    } else if (key == "fwd") {
      if (value == "auto") v.fwd_rows = LayerNormVariant::Rows::automatic;
      else if (value == "warp") v.fwd_rows = LayerNormVariant::Rows::warp;
      else if (value == "block") v.fwd_rows = LayerNormVariant::Rows::block;
      else bad("fwd must be auto, warp or block");
    } else if (key == "bwd_blocks") {
      int64_t b = 0;
      for (char c : value) {
        if (c < '0' || c > '9' || b > 65535) bad("bwd_blocks must be a number in 1..65535");
        b = b * 10 + (c - '0');
      }
      if (value.empty() || b < 1 || b > 65535) bad("bwd_blocks must be a number in 1..65535");
      v.bwd_blocks = b;
    } else if (key == "partials") {
      if (value == "auto") v.bwd_partials = LayerNormVariant::Partials::automatic;
      else if (value == "shared") v.bwd_partials = LayerNormVariant::Partials::shared;
      else if (value == "global") v.bwd_partials = LayerNormVariant::Partials::global;
      else bad("partials must be auto, shared or global");
    } else {
      bad("unknown key '" + std::string(key) + "'");
    }
  }
  return v;
}

// The forward candidates (vec x fwd) and the backward candidates (vec x bwd_blocks x partials) a
// sweep times; each list starts with the default.
inline std::vector<LayerNormVariant> layer_norm_forward_sweep() {
  std::vector<LayerNormVariant> out{LayerNormVariant{}};
  for (int vec : {16, 8, 0})
    for (auto rows : {LayerNormVariant::Rows::warp, LayerNormVariant::Rows::block}) {
      LayerNormVariant v;
      v.vec_bytes = vec;
      v.fwd_rows = rows;
      out.push_back(v);
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
        if (!(v == LayerNormVariant{})) out.push_back(v);
      }
  return out;
}

}  // namespace kiln::cuda
