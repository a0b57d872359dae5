// The index math of the CUDA reductions (core/cuda/plan/reduce_plan.h), checked on the CPU: walking the
// blocks and threads of each kernel exactly as the kernels do, every input element is read once
// and every output (or partial) slot is written once; the max/min combine gives the CPU's answer
// in any tree order. Runs without a GPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <kiln/core/cuda/plan/reduce_plan.h>

#include "test_util.h"

using namespace kiln::cuda::reduction;

namespace {

// Marks count[(row)*n + j] for every value the short-row kernel reads; mirrors short_rows_kernel.
std::vector<int> walk_short_rows(int64_t rows, int64_t n, const ShortRows& p, std::vector<int>& stores) {
  std::vector<int> count(static_cast<size_t>(rows * n), 0);
  for (int64_t b = 0; b < p.blocks; ++b)
    for (int t = 0; t < kShortRowThreads; ++t) {
      int64_t row;
      int lane;
      short_row_of(p, b, t, row, lane);
      if (row >= rows) continue;
      for (int64_t j = lane; j < n; j += p.group) ++count[row * n + j];
      if (lane == 0) ++stores[row];
    }
  return count;
}

// Mirrors long_rows_kernel's loops (the unrolled body and the tail).
std::vector<int> walk_long_rows(int64_t rows, int64_t n, const LongRows& p, std::vector<int>& slots) {
  std::vector<int> count(static_cast<size_t>(rows * n), 0);
  for (int64_t b = 0; b < p.blocks; ++b) {
    int64_t row, chunk, begin, end;
    long_row_of(p, b, n, row, chunk, begin, end);
    REQUIRE(b == row * p.chunks + chunk);
    REQUIRE(row < rows);
    ++slots[b];
    const int64_t S = kRowThreads;
    for (int t = 0; t < kRowThreads; ++t) {
      int64_t j = begin + t;
      for (; j + 3 * S < end; j += 4 * S)
        for (int u = 0; u < 4; ++u) ++count[row * n + j + u * S];
      for (; j < end; j += S) ++count[row * n + j];
    }
  }
  return count;
}

// Mirrors cols_kernel: reads, and the slot thread (x, 0) writes.
std::vector<int> walk_cols(int64_t outer, int64_t n, int64_t inner, const Cols& p, std::vector<int>& slots) {
  std::vector<int> count(static_cast<size_t>(outer * n * inner), 0);
  for (int64_t b = 0; b < p.blocks; ++b) {
    int64_t o, col0, chunk, begin, end;
    col_block_of(p, b, n, o, col0, chunk, begin, end);
    REQUIRE(o < outer);
    for (int y = 0; y < p.y; ++y)
      for (int x = 0; x < p.x; ++x) {
        const int64_t i0 = col0 + int64_t{x} * p.vec;
        if (i0 >= inner) continue;
        for (int64_t i = i0; i < i0 + p.vec; ++i) {
          REQUIRE(i < inner);  // the vector form runs only where inner is a multiple of vec
          const int64_t S = p.y;
          int64_t r = begin + y;
          for (; r + 3 * S < end; r += 4 * S)
            for (int u = 0; u < 4; ++u) ++count[(o * n + r + u * S) * inner + i];
          for (; r < end; r += S) ++count[(o * n + r) * inner + i];
          if (y == 0) ++slots[(o * p.chunks + chunk) * inner + i];
        }
      }
  }
  return count;
}

bool all_ones(const std::vector<int>& v) {
  return std::all_of(v.begin(), v.end(), [](int c) { return c == 1; });
}

}  // namespace

TEST_CASE("short rows: lane groups cover each row once and shuffle inside their group") {
  for (int64_t rows : {1, 3, 7, 100, 1000}) {
    for (int64_t n : {0, 1, 2, 3, 5, 31, 32, 33, 100, 1000, 1024}) {
      CAPTURE(rows);
      CAPTURE(n);
      const ShortRows p = plan_short_rows(rows, n);
      CHECK(p.group >= 1);
      CHECK(p.group <= 32);
      CHECK((p.group & (p.group - 1)) == 0);
      CHECK(p.group * p.rows_per_block == kShortRowThreads);
      CHECK(p.group >= std::min<int64_t>(n, 32));
      std::vector<int> stores(static_cast<size_t>(rows), 0);
      CHECK(all_ones(walk_short_rows(rows, n, p, stores)));
      CHECK(all_ones(stores));
      // The xor tree (offsets group/2 ... 1) never leaves a lane's group or warp.
      for (int t = 0; t < kShortRowThreads; ++t)
        for (int o = p.group / 2; o > 0; o >>= 1) {
          REQUIRE((t ^ o) / p.group == t / p.group);
          REQUIRE((t ^ o) / 32 == t / 32);
        }
    }
  }
}

TEST_CASE("long rows: chunks of a row cover it once; partials get one slot per block") {
  struct Case {
    int64_t rows, n;
  };
  for (Case c : {Case{1, 1025}, Case{3, 8192}, Case{2, 8193}, Case{1, 100003}, Case{5, 20000}, Case{4, 2049}}) {
    CAPTURE(c.rows);
    CAPTURE(c.n);
    const LongRows p = plan_long_rows(c.rows, c.n);
    CHECK(p.chunks == (c.n + kRowChunk - 1) / kRowChunk);
    CHECK(p.blocks == c.rows * p.chunks);
    std::vector<int> slots(static_cast<size_t>(p.blocks), 0);
    CHECK(all_ones(walk_long_rows(c.rows, c.n, p, slots)));
    CHECK(all_ones(slots));
  }
  // Partials are reduced as rows again: a row of 2^40 values ends in at most 4 passes.
  int64_t n = int64_t(1) << 40;
  int passes = 1;
  while (n > kShortRow) {
    n = plan_long_rows(1, n).chunks;
    ++passes;
  }
  CHECK(passes <= 4);
}

TEST_CASE("columns: tiles, stripes and chunks cover each column once") {
  struct Case {
    int64_t outer, n, inner;
  };
  for (Case c : {Case{1, 5, 2}, Case{3, 7, 3}, Case{2, 1000, 33}, Case{1, 100003, 3}, Case{4, 2, 1000},
                 Case{1, 0, 5}, Case{2, 300, 64}, Case{1, 4096, 768}, Case{3, 1, 17}, Case{1, 20000, 40}}) {
    CAPTURE(c.outer);
    CAPTURE(c.n);
    CAPTURE(c.inner);
    const Cols p = plan_cols(c.outer, c.n, c.inner);
    CHECK((p.x & (p.x - 1)) == 0);
    CHECK((p.y & (p.y - 1)) == 0);  // the tree over y halves evenly
    CHECK(p.x <= 32);
    CHECK(p.x * p.y <= kColThreads);
    CHECK(p.tiles * p.x >= c.inner);
    CHECK(p.chunks * p.rows_per_chunk >= c.n);
    CHECK(p.blocks == c.outer * p.tiles * p.chunks);
    std::vector<int> slots(static_cast<size_t>(c.outer * p.chunks * c.inner), 0);
    CHECK(all_ones(walk_cols(c.outer, c.n, c.inner, p, slots)));
    CHECK(all_ones(slots));
    // The partials pass reduces (outer, chunks, inner) with the same kernel and ends.
    if (p.chunks > 1) {
      const Cols q = plan_cols(c.outer, p.chunks, c.inner);
      CHECK(q.chunks < p.chunks);
    }
  }
}

// Note [Vector columns]: vec adjacent columns per thread cover each element once too, and where x
// is 32 in both forms the rows each thread reads (y, chunks) are the scalar form's.
TEST_CASE("columns, vector form: every element once; the scalar form's rows where x is the same") {
  struct Case {
    int64_t outer, n, inner;
  };
  for (int vec : {2, 4, 8})
    for (Case c : {Case{1, 5, 8}, Case{3, 7, 16}, Case{2, 1000, 64}, Case{1, 16384, 768}, Case{4, 2, 1024},
                   Case{1, 0, 8}, Case{2, 300, 2304}, Case{1, 20000, 40}, Case{3, 1, 256}}) {
      if (c.inner % vec != 0) continue;
      CAPTURE(vec);
      CAPTURE(c.n);
      CAPTURE(c.inner);
      const Cols p = plan_cols(c.outer, c.n, c.inner, vec);
      CHECK(p.vec == vec);
      CHECK(p.x <= 32);
      CHECK(p.x * p.y <= kColThreads);
      CHECK(p.tiles * p.x * vec >= c.inner);
      std::vector<int> slots(static_cast<size_t>(c.outer * p.chunks * c.inner), 0);
      CHECK(all_ones(walk_cols(c.outer, c.n, c.inner, p, slots)));
      CHECK(all_ones(slots));
      const Cols s = plan_cols(c.outer, c.n, c.inner);
      if (c.inner >= 32 * vec) {
        CHECK(p.x == s.x);
        CHECK(p.y == s.y);
        CHECK(p.rows_per_chunk == s.rows_per_chunk);
        CHECK(p.chunks == s.chunks);
      }
    }
}

namespace {

// The CPU's rule (core/cpu/reduce.h): scan in order, a NaN best is final, a NaN or strictly better
// value replaces.
template <bool Max, class C>
Best<C> sequential(const std::vector<C>& v) {
  Best<C> b{v[0], 0};
  for (size_t k = 1; k < v.size(); ++k) {
    if (b.value != b.value) break;
    if (v[k] != v[k] || (Max ? v[k] > b.value : v[k] < b.value)) b = {v[k], int64_t(k)};
  }
  return b;
}

// Combines leaves in a random binary tree.
template <bool Max, class C>
Best<C> random_tree(std::vector<Best<C>> items, std::mt19937& rng) {
  while (items.size() > 1) {
    size_t k = std::uniform_int_distribution<size_t>(0, items.size() - 2)(rng);
    Best<C> merged = (rng() & 1) ? better<Max>(items[k], items[k + 1]) : better<Max>(items[k + 1], items[k]);
    items[k] = merged;
    items.erase(items.begin() + static_cast<long>(k) + 1);
  }
  return items[0];
}

template <class C>
bool same(Best<C> a, Best<C> b) {
  return a.index == b.index && std::memcmp(&a.value, &b.value, sizeof(C)) == 0;
}

}  // namespace

TEST_CASE("max/min combine gives the sequential CPU answer for any tree: NaN first, first index on ties") {
  std::mt19937 rng(7);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int trial = 0; trial < 400; ++trial) {
    const size_t len = 1 + rng() % 40;
    std::vector<float> v(len);
    for (float& x : v) {
      switch (rng() % 8) {
        case 0: x = nan; break;
        case 1: x = 0.0f; break;
        case 2: x = -0.0f; break;
        default: x = float(int(rng() % 5) - 2); break;  // many ties
      }
    }
    if (trial % 3 == 0) std::replace_if(v.begin(), v.end(), [](float x) { return x != x; }, 1.0f);  // no NaN
    std::vector<Best<float>> leaves;
    for (size_t k = 0; k < len; ++k) leaves.push_back({v[k], int64_t(k)});
    leaves.push_back({0.0f, -1});  // an identity element anywhere must not matter
    std::shuffle(leaves.begin(), leaves.end(), rng);
    CAPTURE(trial);
    REQUIRE(same(random_tree<true>(leaves, rng), sequential<true>(v)));
    REQUIRE(same(random_tree<false>(leaves, rng), sequential<false>(v)));
  }
  // Integers and doubles too.
  std::vector<int32_t> iv = {3, 9, 9, -4, 9, -4};
  std::vector<Best<int32_t>> il;
  for (size_t k = 0; k < iv.size(); ++k) il.push_back({iv[k], int64_t(k)});
  CHECK(same(random_tree<true>(il, rng), Best<int32_t>{9, 1}));
  CHECK(same(random_tree<false>(il, rng), Best<int32_t>{-4, 3}));
  std::vector<Best<double>> dl = {{1.0, 0}, {std::nan(""), 2}, {std::nan(""), 1}, {5.0, 3}};
  CHECK(random_tree<true>(dl, rng).index == 1);
  CHECK(random_tree<false>(dl, rng).index == 1);
}

TEST_CASE("pow2_at_least and div_up") {
  CHECK(pow2_at_least(0) == 1);
  CHECK(pow2_at_least(1) == 1);
  CHECK(pow2_at_least(3) == 4);
  CHECK(pow2_at_least(32) == 32);
  CHECK(pow2_at_least(33) == 64);
  CHECK(div_up(10, 3) == 4);
  CHECK(div_up(9, 3) == 3);
}
