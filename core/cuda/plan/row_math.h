// Host-and-device arithmetic of the row kernels (softmax, layer norm, cross-entropy): how rows map
// to threads, when 16-byte vector loads are allowed, and the online (max, sum of exp) pair. No CUDA
// headers, so CPU code compiles it and tests/core/test_row_math.cpp checks it without a GPU.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstdlib>
#include <initializer_list>

#include <kiln/core/host_device.h>

namespace kiln::cuda::rowwise {

// Note [Row launches]
// A row kernel walks `rows` contiguous rows of n values (x is (rows, n)). A row of at most
// kWarpRowMax values gets one warp: blockDim (32, kWarpRows), row = blockIdx.x * kWarpRows +
// threadIdx.y. A longer row gets a whole block: blockDim (threads, 1), row = blockIdx.x, with
// threads a multiple of 32 (at most 1024) so each thread has about one vector per pass. Either
// way the threads of a row are threadIdx.x in [0, blockDim.x); thread k handles the vectors
// starting at j = (k + i * blockDim.x) * vec for i = 0, 1, ... while j < n, and the kernels loop
// over rows with a grid stride, so the grid may be capped at kMaxGrid.
inline constexpr int64_t kWarpRowMax = 1024;
inline constexpr int kWarpRows = 4;
inline constexpr int64_t kMaxGrid = 65535LL * 8;

struct RowLaunch {
  int block_x = 32;  // threads per row
  int block_y = 1;   // rows per block
  int64_t grid = 1;
};

// Threads for a block-per-row launch: one per vector chunk, rounded up to whole warps, 32..1024.
inline int block_row_threads(int64_t n, int vec) {
  const int64_t chunks = (n + vec - 1) / vec;
  int64_t t = (chunks + 31) / 32 * 32;
  if (t < 32) t = 32;
  return static_cast<int>(t < 1024 ? t : 1024);
}

inline int64_t capped_grid(int64_t blocks) { return blocks < 1 ? 1 : (blocks < kMaxGrid ? blocks : kMaxGrid); }

// Warp per row up to kWarpRowMax values, block per row beyond (Note [Row launches]).
inline RowLaunch row_launch(int64_t rows, int64_t n, int vec) {
  RowLaunch l;
  if (n <= kWarpRowMax) {
    l.block_x = 32;
    l.block_y = kWarpRows;
    l.grid = capped_grid((rows + kWarpRows - 1) / kWarpRows);
  } else {
    l.block_x = block_row_threads(n, vec);
    l.block_y = 1;
    l.grid = capped_grid(rows);
  }
  return l;
}

// Elements of `elem_size` bytes per 16-byte vector.
inline int vec_width(size_t elem_size) { return static_cast<int>(16 / elem_size); }

// Rows of n elements may use vectors of `vec` when n is a multiple of it and every base pointer
// (null ones skipped) is 16-byte aligned: then every row start and every chunk is aligned too.
inline bool can_vectorize(int64_t n, int vec, std::initializer_list<const void*> ptrs) {
  if (vec <= 1 || n % vec != 0) return false;
  for (const void* p : ptrs)
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// The layer-norm backward splits rows into `blocks` runs of `rows_per_block` consecutive rows (the
// last may be shorter); each run sums its own grad_weight / grad_bias partials. Depends only on
// its arguments (the shape, a constant block count and, in the split backward, the column tiles
// of the vector width in use), so the summation order (and the result) is the same on every run.
struct RowSplit {
  int64_t rows_per_block = 1;
  int64_t blocks = 0;
};
inline constexpr int64_t kMaxPartials = 1024;
inline RowSplit split_rows(int64_t rows, int64_t max_blocks = kMaxPartials) {
  RowSplit s;
  s.rows_per_block = rows <= max_blocks ? 1 : (rows + max_blocks - 1) / max_blocks;
  s.blocks = (rows + s.rows_per_block - 1) / s.rows_per_block;
  return s;
}

KILN_HOST_DEVICE inline float exp_of(float x) { return ::expf(x); }
KILN_HOST_DEVICE inline double exp_of(double x) { return ::exp(x); }
KILN_HOST_DEVICE inline float log_of(float x) { return ::logf(x); }
KILN_HOST_DEVICE inline double log_of(double x) { return ::log(x); }
KILN_HOST_DEVICE inline float sqrt_of(float x) { return ::sqrtf(x); }
KILN_HOST_DEVICE inline double sqrt_of(double x) { return ::sqrt(x); }

// Note [Online softmax]
// The running max m of the values seen and s = sum of exp(x - m) over them, updated one value at
// a time and merged across threads, so a row is read once for its statistics (Milakov and
// Gimelshein 2018). The results equal the CPU's two passes (max first) also for special values:
// -inf values add nothing once a finite value is seen (x == m counts as exp(0) = 1 without
// computing exp(-inf - -inf)); a row of -inf only ends with m = -inf, and exp(x - m) is then NaN
// as on the CPU; NaN makes s NaN; a +inf makes sum() NaN (the CPU computes exp(inf - inf)).
// Empty parts (m = -inf, s = 0) merge as the identity.
template <class A>
struct MaxSum {
  A m = -A(INFINITY);
  A s = 0;

  KILN_HOST_DEVICE void add(A x) {
    if (x > m) {
      s = s * exp_of(m - x) + A(1);
      m = x;
    } else {
      s += x == m ? A(1) : exp_of(x - m);
    }
  }
  KILN_HOST_DEVICE static MaxSum merge(MaxSum a, MaxSum b) {
    MaxSum r;
    r.m = a.m > b.m ? a.m : b.m;
    r.s = a.s * (a.m == r.m ? A(1) : exp_of(a.m - r.m)) + b.s * (b.m == r.m ? A(1) : exp_of(b.m - r.m));
    return r;
  }
  // sum of exp(x - m) over the row (NaN when the max is +inf)
  KILN_HOST_DEVICE A sum() const { return m == A(INFINITY) ? A(NAN) : s; }
  // logsumexp of the row
  KILN_HOST_DEVICE A lse() const { return m + log_of(sum()); }
};

}  // namespace kiln::cuda::rowwise
