// CPU reduction drivers over a contiguous block viewed as (outer, n, inner), reducing n.
// inner == 1 is a row reduction (each output reads one contiguous run); inner > 1 accumulates
// whole rows into a run of outputs, so the inner loop is contiguous and vectorizes.
//
// Note [Deterministic reductions]
// A run of n values is cut into kReduceBlock-sized blocks from its start; each block is reduced
// with a fixed interleaving, and the block results are combined left to right. Blocks may run on
// different threads (when there are fewer rows than threads), but the arithmetic never depends on
// the split, so results are bitwise equal for any thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <kiln/core/parallel.h>
#include <kiln/core/tensor.h>

namespace kiln::cpu {

inline constexpr int64_t kReduceBlock = 4096;    // values per block along a row
inline constexpr int64_t kReduceColumns = 256;   // outputs per task in column reductions

// Sum of f(i) for i < n in kLanes lanes folded pairwise (a fixed order that vectorizes): the row
// sums of softmax and cross-entropy.
inline constexpr int kLanes = 16;
template <class C, class F>
inline C lane_sum(int64_t n, F f) {
  C s[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) s[j] += f(i + j);
  for (; i < n; ++i) s[0] += f(i);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) s[j] += s[j + w];
  return s[0];
}

// max over x[0, n); NaN is skipped here and reappears through exp(x - max) (the row max of
// softmax and cross-entropy). GCC does not vectorize a float max reduction (NaN and -0 rules), so
// the lanes are spelled with the GCC/Clang vector extension, one register wide for the kernel set
// being compiled (Note [CPU capabilities]): a 64-byte vector on AVX2 was kept on the stack and
// reduced through memory every iteration (softmax 3x slower than on AVX-512, perf on Zen 4).
// kRowMaxRegisters independent registers of lanes: with one, each max waited on the previous one
// (4 cycles' latency per 8 floats on AVX2, the costliest pass of softmax after exp; 3.2x faster
// with four on the Xeon VM). The max does not depend on the lane or register count, so every set
// returns the same value.
inline constexpr int kRowMaxRegisters = 4;
template <class C>
inline C row_max(const C* x, int64_t n) {
#if defined(__AVX512F__)
  constexpr int kBytes = 64;
#elif defined(__AVX__)
  constexpr int kBytes = 32;
#else
  constexpr int kBytes = 16;
#endif
  constexpr int64_t kWidth = kBytes / sizeof(C);
  typedef C Vec __attribute__((vector_size(kBytes)));
  Vec lowest;
  for (int64_t j = 0; j < kWidth; ++j) lowest[j] = -std::numeric_limits<C>::infinity();
  static_assert(kRowMaxRegisters == 4);
  Vec m[kRowMaxRegisters] = {lowest, lowest, lowest, lowest};  // whole values: no maybe-uninitialized
  int64_t i = 0;
  for (; i + kRowMaxRegisters * kWidth <= n; i += kRowMaxRegisters * kWidth)
    for (int k = 0; k < kRowMaxRegisters; ++k) {
      Vec v;
      std::memcpy(&v, x + i + k * kWidth, sizeof v);
      m[k] = v > m[k] ? v : m[k];
    }
  for (; i + kWidth <= n; i += kWidth) {
    Vec v;
    std::memcpy(&v, x + i, sizeof v);
    m[0] = v > m[0] ? v : m[0];
  }
  for (int k = 1; k < kRowMaxRegisters; ++k) m[0] = m[k] > m[0] ? m[k] : m[0];
  C r = m[0][0];
  for (int64_t j = 1; j < kWidth; ++j) r = C(m[0][j]) > r ? C(m[0][j]) : r;
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}

// Sum of f(p[i]) for i < n with 8 interleaved accumulators (a fixed order the compiler vectorizes).
template <class Acc, class T, class F>
inline Acc sum_run(const T* __restrict__ p, int64_t n, F f) {
  Acc a[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += f(p[i + j]);
  Acc s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  for (; i < n; ++i) s += f(p[i]);
  return s;
}

// out[r] = combine(...combine(init, block(r, 0, len0)), block(r, kReduceBlock, len1)...) for
// r < rows, where block(r, start, len) reduces values [start, start + len) of row r.
template <class Acc, class Block, class Combine>
void reduce_rows(int64_t rows, int64_t n, Acc init, Acc* out, Block block, Combine combine) {
  const int64_t blocks = std::max<int64_t>(1, (n + kReduceBlock - 1) / kReduceBlock);
  auto len = [&](int64_t b) { return std::min(kReduceBlock, n - b * kReduceBlock); };
  if (rows >= num_threads() || blocks == 1) {
    parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        Acc a = init;
        for (int64_t b = 0; b < blocks; ++b) a = combine(a, block(r, b * kReduceBlock, len(b)));
        out[r] = a;
      }
    });
    return;
  }
  std::vector<Acc> part(static_cast<size_t>(rows * blocks));
  parallel_for(0, rows * blocks, std::max<int64_t>(1, kGrainSize / kReduceBlock), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) part[t] = block(t / blocks, (t % blocks) * kReduceBlock, len(t % blocks));
  });
  for (int64_t r = 0; r < rows; ++r) {
    Acc a = init;
    for (int64_t b = 0; b < blocks; ++b) a = combine(a, part[r * blocks + b]);
    out[r] = a;
  }
}

// Calls column(o, i0, m) for runs of at most kReduceColumns outputs [o*inner + i0, + m), in
// parallel; each output belongs to exactly one call, so the split never changes a result.
template <class Column>
void for_each_column_run(int64_t outer, int64_t n, int64_t inner, Column column) {
  const int64_t chunks = (inner + kReduceColumns - 1) / kReduceColumns;
  const int64_t work = std::max<int64_t>(1, n * std::min(inner, kReduceColumns));
  parallel_for(0, outer * chunks, std::max<int64_t>(1, kGrainSize / work), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      int64_t i0 = (t % chunks) * kReduceColumns;
      column(t / chunks, i0, std::min(kReduceColumns, inner - i0));
    }
  });
}

// out[o*inner + i] = sum over r < n of f(x[(o*n + r)*inner + i], o*inner + i).
template <class Acc, class T, class F>
void sum_reduce(const T* x, int64_t outer, int64_t n, int64_t inner, Acc* out, F f) {
  if (inner == 1) {
    reduce_rows<Acc>(
        outer, n, Acc{}, out,
        [&](int64_t r, int64_t start, int64_t len) {
          return sum_run<Acc>(x + r * n + start, len, [&](T v) { return f(v, r); });
        },
        [](Acc a, Acc b) { return a + b; });
    return;
  }
  for_each_column_run(outer, n, inner, [&](int64_t o, int64_t i0, int64_t m) {
    Acc* __restrict__ a = out + o * inner + i0;
    const int64_t k0 = o * inner + i0;
    for (int64_t i = 0; i < m; ++i) a[i] = Acc{};
    for (int64_t r = 0; r < n; ++r) {
      const T* __restrict__ row = x + (o * n + r) * inner + i0;
      for (int64_t i = 0; i < m; ++i) a[i] += f(row[i], k0 + i);
    }
  });
}

// The best value and its position along the reduced dim; index -1 marks "nothing yet".
template <class C>
struct Best {
  C value{};
  int64_t index = -1;
};

// Whether v replaces best: a NaN best is final, a NaN v wins, otherwise strictly better (so the
// first position wins ties).
template <bool Max, class C>
inline bool replaces(C v, C best) {
  if (best != best) return false;
  return v != v || (Max ? v > best : v < best);
}

// out[o*inner + i] = the max (Max) or min over r < n of x[(o*n + r)*inner + i], as C; n >= 1.
template <bool Max, class C, class T>
void extremum_reduce(const T* x, int64_t outer, int64_t n, int64_t inner, Best<C>* out) {
  if (inner == 1) {
    reduce_rows<Best<C>>(
        outer, n, Best<C>{}, out,
        [&](int64_t r, int64_t start, int64_t len) {
          const T* p = x + r * n + start;
          Best<C> b{static_cast<C>(p[0]), start};
          for (int64_t k = 1; k < len && b.value == b.value; ++k) {
            C v = static_cast<C>(p[k]);
            if (replaces<Max>(v, b.value)) b = {v, start + k};
          }
          return b;
        },
        [](Best<C> a, Best<C> b) { return (a.index < 0 || replaces<Max>(b.value, a.value)) ? b : a; });
    return;
  }
  for_each_column_run(outer, n, inner, [&](int64_t o, int64_t i0, int64_t m) {
    Best<C>* __restrict__ a = out + o * inner + i0;
    const T* first = x + o * n * inner + i0;
    for (int64_t i = 0; i < m; ++i) a[i] = {static_cast<C>(first[i]), 0};
    for (int64_t r = 1; r < n; ++r) {
      const T* __restrict__ row = x + (o * n + r) * inner + i0;
      for (int64_t i = 0; i < m; ++i) {
        C v = static_cast<C>(row[i]);
        if (replaces<Max>(v, a[i].value)) a[i] = {v, r};
      }
    }
  });
}

}  // namespace kiln::cpu

// The reduction kernels behind core/ops/reduce.h on the CPU (reduce.cpp), declared in
// core/kernels/reduce.inc (Note [Kernel interfaces]). Floating sums accumulate in double.
#define KILN_CPU_KERNELS <kiln/core/kernels/reduce.inc>
#include <kiln/core/cpu/declare_kernels.h>
