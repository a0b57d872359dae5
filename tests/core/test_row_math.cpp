// The host-and-device arithmetic of the CUDA row kernels (core/cuda/plan/row_math.h), checked on the CPU
// so it is covered without a GPU: launch shapes, the thread -> chunk mapping (every element once),
// vector eligibility, the layer-norm backward row split, and the online (max, sum) pair, including
// a simulation of the warp butterflies and the block merge the kernels do.
#include <kiln/core/cuda/plan/row_math.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "test_util.h"

using namespace kiln;
using namespace kiln::cuda::rowwise;

namespace {

// The chunks a row's threads visit (Note [Row launches]): how often each element is touched.
std::vector<int> coverage(int64_t n, int vec, int threads) {
  std::vector<int> hits(static_cast<size_t>(n), 0);
  for (int k = 0; k < threads; ++k)
    for (int64_t j = int64_t(k) * vec; j < n; j += int64_t(threads) * vec)
      for (int i = 0; i < vec; ++i) {
        REQUIRE(j + i < n);
        ++hits[j + i];
      }
  return hits;
}

// What the kernels compute for one row: each thread adds its chunks in order, each warp merges by
// xor butterfly (every lane must end equal), then, for a block of several warps, lane w of every
// warp merges the warp results (identity past the last warp) by butterfly again.
template <class A>
MaxSum<A> simulate_row(const std::vector<A>& x, int vec, int threads) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<MaxSum<A>> lane(threads);
  for (int k = 0; k < threads; ++k)
    for (int64_t j = int64_t(k) * vec; j < n; j += int64_t(threads) * vec)
      for (int i = 0; i < vec; ++i) lane[k].add(x[j + i]);
  auto butterfly = [](std::vector<MaxSum<A>> w) {  // 32 lanes
    for (int o = 16; o > 0; o >>= 1) {
      std::vector<MaxSum<A>> next(32);
      for (int l = 0; l < 32; ++l) next[l] = MaxSum<A>::merge(w[l], w[l ^ o]);
      w = next;
    }
    for (int l = 1; l < 32; ++l) {
      CHECK((std::memcmp(&w[l].s, &w[0].s, sizeof(A)) == 0 || (std::isnan(w[l].s) && std::isnan(w[0].s))));
      CHECK((w[l].m == w[0].m || (std::isnan(w[l].m) && std::isnan(w[0].m))));
    }
    return w[0];
  };
  const int warps = threads / 32;
  std::vector<MaxSum<A>> per_warp;
  for (int w = 0; w < warps; ++w)
    per_warp.push_back(butterfly(std::vector<MaxSum<A>>(lane.begin() + w * 32, lane.begin() + (w + 1) * 32)));
  if (warps == 1) return per_warp[0];
  std::vector<MaxSum<A>> second(32);
  for (int w = 0; w < warps; ++w) second[w] = per_warp[w];
  return butterfly(second);
}

double two_pass_lse(const std::vector<double>& x) {
  double m = -INFINITY, s = 0;
  for (double v : x) m = std::max(m, v);
  for (double v : x) s += std::exp(v - m);
  return m + std::log(s);
}

}  // namespace

TEST_CASE("row launches: a warp per row up to 1024 values, a block of whole warps beyond") {
  RowLaunch w = row_launch(10, 1024, 8);
  CHECK(w.block_x == 32);
  CHECK(w.block_y == kWarpRows);
  CHECK(w.grid == 3);  // ceil(10 / 4)
  RowLaunch b = row_launch(10, 1025, 1);
  CHECK(b.block_x == 1024);
  CHECK(b.block_y == 1);
  CHECK(b.grid == 10);
  CHECK(row_launch(3, 50257, 1).block_x == 1024);
  CHECK(row_launch(3, 2048, 8).block_x == 256);  // one 8-wide vector per thread
  CHECK(row_launch(3, 1032, 8).block_x == 160);  // 129 vectors -> 5 warps
  CHECK(row_launch(0, 7, 1).grid == 1);
  CHECK(row_launch(int64_t(1) << 40, 7, 1).grid == kMaxGrid);
  CHECK(block_row_threads(1, 1) == 32);
  CHECK(block_row_threads(7, 8) == 32);
  for (int64_t n : {1, 7, 64, 1000, 1025, 4096, 50257})
    for (int vec : {1, 2, 4, 8}) {
      const int t = block_row_threads(n, vec);
      CHECK(t % 32 == 0);
      CHECK(t >= 32);
      CHECK(t <= 1024);
    }
}

TEST_CASE("the thread -> chunk mapping touches every element exactly once") {
  for (int64_t n : {1, 7, 31, 32, 33, 1000, 1024, 1025, 4104, 50257}) {
    for (int vec : {1, 2, 4, 8}) {
      if (vec > 1 && n % vec != 0) continue;  // vectors only when they divide the row
      for (int threads : {32, block_row_threads(n, vec), 1024}) {
        CAPTURE(n);
        CAPTURE(vec);
        CAPTURE(threads);
        std::vector<int> hits = coverage(n, vec, threads);
        CHECK(std::count(hits.begin(), hits.end(), 1) == n);
      }
    }
  }
}

TEST_CASE("vectors need a multiple of the width and 16-byte aligned pointers") {
  alignas(16) float buf[64];
  CHECK(vec_width(2) == 8);
  CHECK(vec_width(4) == 4);
  CHECK(vec_width(8) == 2);
  CHECK(can_vectorize(64, 4, {buf, buf + 4, nullptr}));
  CHECK_FALSE(can_vectorize(62, 4, {buf}));
  CHECK_FALSE(can_vectorize(64, 4, {buf, buf + 1}));
  CHECK_FALSE(can_vectorize(64, 1, {buf}));
  CHECK(can_vectorize(0, 8, {buf}));
}

TEST_CASE("the layer-norm backward row split covers every row once, at most 1024 runs") {
  for (int64_t rows : {1, 5, 1023, 1024, 1025, 8192, 100003}) {
    RowSplit s = split_rows(rows);
    CAPTURE(rows);
    CHECK(s.blocks <= kMaxPartials);
    CHECK(s.blocks * s.rows_per_block >= rows);
    CHECK((s.blocks - 1) * s.rows_per_block < rows);  // no empty run
  }
  CHECK(split_rows(8192).rows_per_block == 8);
  CHECK(split_rows(0).blocks == 0);
}

TEST_CASE("online max/sum: any split and merge order gives the two-pass logsumexp") {
  for (int64_t n : {1, 7, 32, 1000, 1025, 50257}) {
    CAPTURE(n);
    std::vector<double> xd = test::values(test::random({n}, DType::f64, uint64_t(n), -30, 30));
    const double want = two_pass_lse(xd);
    for (int threads : {32, 256, 1024}) {
      CHECK(simulate_row<double>(xd, 1, threads).lse() == doctest::Approx(want).epsilon(1e-13));
      std::vector<float> xf(xd.begin(), xd.end());
      std::vector<double> xr(xf.begin(), xf.end());
      const double want_f = two_pass_lse(xr);
      CHECK(simulate_row<float>(xf, 1, threads).lse() == doctest::Approx(want_f).epsilon(2e-6));
      if (n % 8 == 0) CHECK(simulate_row<float>(xf, 8, threads).lse() == doctest::Approx(want_f).epsilon(2e-6));
    }
  }
}

TEST_CASE("online max/sum treats special values as the CPU's two passes do") {
  const double inf = std::numeric_limits<double>::infinity();
  auto lse_of = [](std::vector<double> x, int threads) { return simulate_row<double>(x, 1, threads).lse(); };
  for (int threads : {32, 64}) {
    // -inf entries add nothing, wherever they fall (first, inside a lane, a whole lane of them).
    std::vector<double> x(70, -inf);
    x[3] = 1.0;
    x[40] = 2.0;
    CHECK(lse_of(x, threads) == doctest::Approx(std::log(std::exp(1.0) + std::exp(2.0))));
    // All -inf: the max stays -inf and exp(x - max) is NaN, as on the CPU.
    MaxSum<double> all = simulate_row<double>(std::vector<double>(5, -inf), 1, threads);
    CHECK(all.m == -inf);
    CHECK(std::isnan(std::exp(-inf - all.m)));
    // NaN anywhere: the sum is NaN.
    std::vector<double> with_nan = {1.0, NAN, 3.0};
    CHECK(std::isnan(lse_of(with_nan, threads)));
    // +inf: NaN, as exp(inf - inf) makes the CPU's sum NaN.
    CHECK(std::isnan(lse_of({1.0, inf, 2.0}, threads)));
    CHECK(std::isnan(lse_of({inf, inf}, threads)));
  }
  // The identity (m = -inf, s = 0) merges to nothing, in either order.
  MaxSum<float> a, e;
  a.add(2.0f);
  a.add(-1.0f);
  MaxSum<float> l = MaxSum<float>::merge(a, e), r = MaxSum<float>::merge(e, a);
  CHECK(l.m == a.m);
  CHECK(l.s == a.s);
  CHECK(r.s == a.s);
  MaxSum<float> ee = MaxSum<float>::merge(e, e);
  CHECK(ee.m == -INFINITY);
  CHECK(ee.s == 0.0f);
}
