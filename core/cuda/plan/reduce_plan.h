// Launch geometry and the max/min combine rule of the CUDA reductions (core/cuda/kernels/reduce.cu), kept
// free of CUDA headers so the CPU test tests/core/test_reduce_plan.cpp checks them: every element
// of an (outer, n, inner) problem is read by exactly one thread, and max/min give the CPU's answer
// whatever the combine tree.
#pragma once

#include <cstdint>
#include <type_traits>

#include <kiln/core/host_device.h>

namespace kiln::cuda::reduction {

// Note [CUDA reductions]
// The front (core/ops/reduce.cpp) plans every reduction as dense memory read as (outer, n, inner),
// reducing n (reduced dims collapsed, copying only when the layout needs it). Then:
// * inner == 1, n <= kShortRow ("short rows"): a group of G lanes per row, G the power of two
//   >= n capped at 32 (so several rows share a warp when rows are short); lane l reads values
//   l, l + G, ... of its row, then a shuffle tree inside the group.
// * inner == 1, longer rows: blocks of kRowThreads threads, each reducing one chunk of at most
//   kRowChunk values of one row (thread t reads values t, t + kRowThreads, ... of the chunk, then
//   a block tree). A row of more than one chunk writes one partial per chunk, and the partials
//   (rows, chunks) are reduced as rows again (a full reduction of a huge tensor is two passes).
// * inner > 1 ("columns", e.g. the bias gradient: sum over dim 0 of (N, C)): blocks of X x Y
//   threads, X = the power of two >= inner capped at 32 adjacent columns (a warp reads along
//   memory), Y row stripes. A block reduces a chunk of Y * kColRowsPerThread rows of its X
//   columns, thread (x, y) reading rows y, y + Y, ... of the chunk, then a tree over y in shared
//   memory. More than one chunk per column writes partials (outer, chunks, inner) that are
//   reduced as columns again. No transpose is ever made.
// Every split depends only on the shape and every combine happens in a fixed order, so a result
// is bitwise the same on every run (no atomics). Sums accumulate in float (f64 in double,
// integers in i64); max/min are exact.

inline constexpr int64_t kShortRow = 1024;        // rows up to this long use lane groups
inline constexpr int kShortRowThreads = 256;      // threads per block of the short-row kernel
inline constexpr int kRowThreads = 512;           // threads per block of the long-row kernel
inline constexpr int64_t kRowChunk = 8192;        // values one long-row block reduces (16 per thread)
inline constexpr int kColThreads = 512;           // at most this many threads per column block
inline constexpr int64_t kColRowsPerThread = 16;  // rows one column thread reads per chunk

KILN_HOST_DEVICE constexpr int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}
KILN_HOST_DEVICE constexpr int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }
KILN_HOST_DEVICE constexpr int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// --- short rows ------------------------------------------------------------------------------
struct ShortRows {
  int group = 1;          // lanes per row: a power of two <= 32
  int rows_per_block = 1; // kShortRowThreads / group
  int64_t blocks = 0;
};
inline ShortRows plan_short_rows(int64_t rows, int64_t n) {
  ShortRows p;
  p.group = static_cast<int>(min64(32, pow2_at_least(n)));
  p.rows_per_block = kShortRowThreads / p.group;
  p.blocks = div_up(rows, p.rows_per_block);
  return p;
}
// Thread t of block b reduces values lane, lane + group, ... (< n) of `row` (ignored if >= rows).
KILN_HOST_DEVICE inline void short_row_of(const ShortRows& p, int64_t b, int t, int64_t& row, int& lane) {
  row = b * p.rows_per_block + t / p.group;
  lane = t % p.group;
}

// --- long rows -------------------------------------------------------------------------------
struct LongRows {
  int64_t chunks = 1;  // per row; > 1 means the blocks write partials
  int64_t blocks = 0;  // rows * chunks
};
inline LongRows plan_long_rows(int64_t rows, int64_t n) {
  LongRows p;
  p.chunks = div_up(n, kRowChunk);
  p.blocks = rows * p.chunks;
  return p;
}
// Block b reduces values [begin, end) of `row` (thread t: begin + t, begin + t + kRowThreads, ...)
// into slot row * chunks + chunk.
KILN_HOST_DEVICE inline void long_row_of(const LongRows& p, int64_t b, int64_t n, int64_t& row, int64_t& chunk,
                                         int64_t& begin, int64_t& end) {
  row = b / p.chunks;
  chunk = b % p.chunks;
  begin = chunk * kRowChunk;
  end = min64(n, begin + kRowChunk);
}

// --- columns ---------------------------------------------------------------------------------
struct Cols {
  int x = 1, y = 1;            // block shape: x threads across columns, y row stripes (x*y <= kColThreads)
  int vec = 1;                 // adjacent columns per thread, read as one vector load (Note [Vector columns])
  int64_t tiles = 0;           // column tiles of x * vec per outer index
  int64_t rows_per_chunk = 1;  // y * kColRowsPerThread
  int64_t chunks = 1;          // per column; > 1 means the blocks write partials (outer, chunks, inner)
  int64_t blocks = 0;          // outer * tiles * chunks
};
// Note [Vector columns]
// With vec > 1 (inner a multiple of vec, the data aligned to vec elements: the caller checks) a
// thread reads vec adjacent columns per row with one load, so a warp reads 32 * vec contiguous
// values of a row instead of 32. x counts threads, so a block spans x * vec columns; y and the row
// chunks are those of vec == 1 whenever x is (inner >= 32 * vec), and then each column is summed
// in the same order by both forms: their results are bitwise equal.
inline Cols plan_cols(int64_t outer, int64_t n, int64_t inner, int vec = 1) {
  Cols p;
  p.vec = vec;
  p.x = static_cast<int>(min64(32, pow2_at_least(div_up(inner, vec))));
  p.y = static_cast<int>(min64(kColThreads / p.x, pow2_at_least(n)));
  p.tiles = div_up(inner, int64_t{p.x} * vec);
  p.rows_per_chunk = p.y * kColRowsPerThread;
  p.chunks = n > 0 ? div_up(n, p.rows_per_chunk) : 1;
  p.blocks = outer * p.tiles * p.chunks;
  return p;
}
// Block b covers columns [col0, col0 + x * vec) of outer index o and rows [begin, end); thread (x,
// y) reads columns col0 + x * vec + [0, vec) (those < inner) at rows begin + y, begin + y + p.y, ... (< end).
KILN_HOST_DEVICE inline void col_block_of(const Cols& p, int64_t b, int64_t n, int64_t& o, int64_t& col0,
                                          int64_t& chunk, int64_t& begin, int64_t& end) {
  chunk = b % p.chunks;
  const int64_t rest = b / p.chunks;
  col0 = (rest % p.tiles) * p.x * p.vec;
  o = rest / p.tiles;
  begin = chunk * p.rows_per_chunk;
  end = min64(n, begin + p.rows_per_chunk);
}

// --- max / min -------------------------------------------------------------------------------
// A candidate value and its position along the reduced dim; index -1 means "nothing yet".
// A plain aggregate so CUDA can keep arrays of it in shared memory.
template <class C>
struct Best {
  C value;
  int64_t index;
};

template <class C>
KILN_HOST_DEVICE constexpr bool is_nan_value(C v) {
  if constexpr (std::is_floating_point_v<C>) return v != v;
  else return false;
}

// The better of two candidates under one total order: NaN first, then the larger (Max) or smaller
// value, then the smaller position. Because it is an order, any combine tree gives the CPU's answer
// (the first NaN if there is one, else the first position of the best value; -0 and +0 tie).
template <bool Max, class C>
KILN_HOST_DEVICE inline Best<C> better(Best<C> a, Best<C> b) {
  if (a.index < 0) return b;
  if (b.index < 0) return a;
  const bool an = is_nan_value(a.value), bn = is_nan_value(b.value);
  if (an != bn) return an ? a : b;
  if (!an) {
    if (Max ? b.value > a.value : b.value < a.value) return b;
    if (Max ? a.value > b.value : a.value < b.value) return a;
  }
  return a.index <= b.index ? a : b;
}

}  // namespace kiln::cuda::reduction
