// The flash-attention kernels' index math on the CPU (core/cuda/plan/flash_attention_tiling.h): the
// causal tile skipping visits every tile holding a visible (query, key) pair and no tile without
// one, the block order covers every (head, tile) once, the shared-memory layouts fit and keep
// WMMA's alignment, and a host mirror of the kernels' tile loops computes attention and its
// gradients. Runs without a GPU.
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include <kiln/core/cuda/plan/flash_attention_tiling.h>

using namespace kiln;
namespace flash = kiln::cuda::flash;

namespace {

// Some (query, key) pair with qi in [q0, q1) and kj in [k0, k1) is visible.
bool any_visible(int q0, int q1, int k0, int k1, int t, bool causal) {
  for (int qi = q0; qi < q1; ++qi)
    for (int kj = k0; kj < k1; ++kj)
      if (flash::visible(qi, kj, t, causal)) return true;
  return false;
}

// Every key-tile width, causal flag and sequence length the tile-visit tests sweep.
template <class F>
void for_each_tiling(F&& check) {
  for (int cols : {32, 64})
    for (bool causal : {true, false})
      for (int t : {1, 2, 15, 16, 17, 31, 63, 64, 65, 100, 127, 128, 129, 200, 256, 1000}) {
        CAPTURE(cols);
        CAPTURE(causal);
        CAPTURE(t);
        check(cols, causal, t);
      }
}

}  // namespace

TEST_CASE("flash tiling: the mask") {
  CHECK(flash::visible(3, 3, 5, true));
  CHECK(flash::visible(3, 0, 5, true));
  CHECK_FALSE(flash::visible(3, 4, 5, true));
  CHECK(flash::visible(3, 4, 5, false));
  CHECK_FALSE(flash::visible(5, 0, 5, false));  // padded query row
  CHECK_FALSE(flash::visible(0, 5, 5, false));  // padded key row
  CHECK_FALSE(flash::visible(7, 6, 5, true));
}

TEST_CASE("flash tiling: query tiles visit exactly the key tiles with a visible pair") {
  const int rows = flash::kRowsPerBlock;
  for_each_tiling([&](int cols, bool causal, int t) {
    for (int m0 = 0; m0 < t; m0 += rows) {
      const int end = flash::key_end(m0, rows, t, causal);
      CHECK(end <= t);
      for (int n0 = 0; n0 < t; n0 += cols) {
        const bool visited = n0 < end;
        CHECK_MESSAGE(visited == any_visible(m0, m0 + rows, n0, n0 + cols, t, causal), "m0 ", m0, " n0 ", n0);
      }
    }
  });
}

TEST_CASE("flash tiling: key tiles visit exactly the query tiles with a visible pair") {
  const int rows = flash::kRowsPerBlock;
  for_each_tiling([&](int cols, bool causal, int t) {
    for (int n0 = 0; n0 < t; n0 += rows) {
      const int begin = flash::query_begin(n0, cols, causal);
      CHECK(begin % cols == 0);  // tiles stay aligned at 0
      for (int m0 = 0; m0 < t; m0 += cols) {
        const bool visited = m0 >= begin;
        CHECK_MESSAGE(visited == any_visible(m0, m0 + cols, n0, n0 + rows, t, causal), "n0 ", n0, " m0 ", m0);
      }
    }
  });
}

TEST_CASE("flash tiling: the block order covers every (head, tile) once") {
  for (bool heavy_last : {true, false})
    for (int tiles : {1, 2, 7, 16}) {
      const int64_t heads = 5;
      std::set<std::pair<int64_t, int>> seen;
      for (int64_t block = 0; block < heads * tiles; ++block) {
        const flash::BlockTile bt = flash::block_tile(block, tiles, heavy_last);
        CHECK(bt.bh >= 0);
        CHECK(bt.bh < heads);
        CHECK(bt.tile >= 0);
        CHECK(bt.tile < tiles);
        seen.insert({bt.bh, bt.tile});
        if (block % tiles == 0) CHECK(bt.tile == (heavy_last ? tiles - 1 : 0));  // each head starts with its heaviest tile
      }
      CHECK(seen.size() == size_t(heads * tiles));
    }
  // Large flattened indices stay exact (heads beyond 2^31 / tiles).
  const flash::BlockTile far = flash::block_tile(int64_t(3) << 33, 16, false);
  CHECK(far.bh == (int64_t(3) << 33) / 16);
  CHECK(far.tile == 0);
}

namespace {
template <class L>
void check_regions(const std::vector<int64_t>& offsets) {
  for (int64_t off : offsets) CHECK(off % 128 == 0);
  for (size_t i = 1; i < offsets.size(); ++i) CHECK(offsets[i] > offsets[i - 1]);
  CHECK(L::kBytes <= flash::kMaxSharedBytes);
  // 16-bit tile pitches: WMMA wants a multiple of 8 elements; 16 rows of any tile start 32-byte aligned.
  CHECK(L::kLd % 8 == 0);
  CHECK(L::kPLd % 8 == 0);
  CHECK((16 * L::kLd * flash::kElem) % 32 == 0);
  CHECK((16 * L::kPLd * flash::kElem) % 32 == 0);
  CHECK(L::kCols % 16 == 0);
}
}  // namespace

TEST_CASE("flash tiling: shared-memory layouts fit sm_90 and keep WMMA alignment") {
  using F64 = flash::FwdLayout<64>;
  using F128 = flash::FwdLayout<128>;
  check_regions<F64>({F64::kQ, F64::kK, F64::kV, F64::kS, F64::kP, F64::kTab, F64::kRowVal, F64::kBytes});
  check_regions<F128>({F128::kQ, F128::kK, F128::kV, F128::kS, F128::kP, F128::kTab, F128::kRowVal, F128::kBytes});
  CHECK(F128::kSLd % 4 == 0);
  CHECK((16 * F128::kSLd * 4) % 32 == 0);
  using Q64 = flash::DqLayout<64>;
  using Q128 = flash::DqLayout<128>;
  check_regions<Q64>({Q64::kQ, Q64::kDo, Q64::kK, Q64::kV, Q64::kP, Q64::kTab, Q64::kLse, Q64::kDelta, Q64::kBytes});
  check_regions<Q128>(
      {Q128::kQ, Q128::kDo, Q128::kK, Q128::kV, Q128::kP, Q128::kTab, Q128::kLse, Q128::kDelta, Q128::kBytes});
  using K64 = flash::DkvLayout<64>;
  using K128 = flash::DkvLayout<128>;
  check_regions<K64>({K64::kK, K64::kV, K64::kQ, K64::kDo, K64::kP, K64::kTab, K64::kLse, K64::kDelta, K64::kBytes});
  check_regions<K128>(
      {K128::kK, K128::kV, K128::kQ, K128::kDo, K128::kP, K128::kTab, K128::kLse, K128::kDelta, K128::kBytes});
  // Every region is as large as what the kernel keeps there.
  CHECK(F128::kK - F128::kQ >= int64_t(flash::kRowsPerBlock) * F128::kLd * 2);
  CHECK(F128::kP - F128::kS >= int64_t(flash::kRowsPerBlock) * F128::kSLd * 4);
  CHECK(F128::kTab - F128::kP >= int64_t(flash::kRowsPerBlock) * F128::kPLd * 2);
  CHECK(K128::kP - K128::kDo >= int64_t(K128::kCols) * K128::kLd * 2);
  CHECK(K128::kDelta - K128::kLse >= int64_t(K128::kCols) * 4);
}

// --- the kernels' tile loops on the host ----------------------------------------------------
// A double-precision mirror of the three kernels' loops (flash_attention.cu,
// flash_attention_backward.cu): the same block and tile walks (key_end, query_begin, visible),
// the forward's online softmax in log2 units with its -inf guard, the logsumexp it saves, and the
// backward's P rebuilt from that lse, delta = rowsum(dO * O), dQ and dK scaled once at the end.
// Checked against plain attention. It cannot run the WMMA code, but it pins down the algorithm and
// the conventions the two passes share (lse in natural-log units, which tiles are skipped).
namespace {

constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;

struct Attn {
  int t, d;
  std::vector<double> q, k, v, dout;  // (t, d) row-major
};

Attn make_attn(int t, int d, uint64_t seed) {
  auto r = [&](uint64_t s, double lo, double hi) {
    return kiln::test::values(kiln::test::random({t, d}, kiln::DType::f64, s, lo, hi));
  };
  return {t, d, r(seed, -3, 3), r(seed + 1, -3, 3), r(seed + 2, -2, 2), r(seed + 3, -1, 1)};
}

double dot_rows(const std::vector<double>& a, int i, const std::vector<double>& b, int j, int d) {
  double s = 0;
  for (int c = 0; c < d; ++c) s += a[size_t(i) * d + c] * b[size_t(j) * d + c];
  return s;
}

struct Grads {
  std::vector<double> out, lse, dq, dk, dv;
};

// Plain attention and its gradients, in double.
Grads reference(const Attn& a, bool causal, double scale) {
  const int t = a.t, d = a.d;
  Grads g{std::vector<double>(size_t(t) * d, 0), std::vector<double>(t, 0), std::vector<double>(size_t(t) * d, 0),
          std::vector<double>(size_t(t) * d, 0), std::vector<double>(size_t(t) * d, 0)};
  std::vector<double> p(size_t(t) * t, 0), dp(size_t(t) * t, 0);
  for (int i = 0; i < t; ++i) {
    double m = -INFINITY;
    for (int j = 0; j < t; ++j)
      if (!causal || j <= i) m = std::max(m, scale * dot_rows(a.q, i, a.k, j, d));
    double s = 0;
    for (int j = 0; j < t; ++j)
      if (!causal || j <= i) s += std::exp(scale * dot_rows(a.q, i, a.k, j, d) - m);
    g.lse[i] = m + std::log(s);
    for (int j = 0; j < t; ++j)
      p[size_t(i) * t + j] = (!causal || j <= i) ? std::exp(scale * dot_rows(a.q, i, a.k, j, d) - g.lse[i]) : 0.0;
  }
  for (int i = 0; i < t; ++i)
    for (int j = 0; j < t; ++j) {
      const double pij = p[size_t(i) * t + j];
      dp[size_t(i) * t + j] = dot_rows(a.dout, i, a.v, j, d);
      for (int c = 0; c < d; ++c) {
        g.out[size_t(i) * d + c] += pij * a.v[size_t(j) * d + c];
        g.dv[size_t(j) * d + c] += pij * a.dout[size_t(i) * d + c];
      }
    }
  for (int i = 0; i < t; ++i) {
    double rowsum = 0;
    for (int j = 0; j < t; ++j) rowsum += dp[size_t(i) * t + j] * p[size_t(i) * t + j];
    for (int j = 0; j < t; ++j) {
      const double ds = p[size_t(i) * t + j] * (dp[size_t(i) * t + j] - rowsum);
      for (int c = 0; c < d; ++c) {
        g.dq[size_t(i) * d + c] += scale * ds * a.k[size_t(j) * d + c];
        g.dk[size_t(j) * d + c] += scale * ds * a.q[size_t(i) * d + c];
      }
    }
  }
  return g;
}

// flash_fwd_kernel: block m0 owns rows [m0, m0 + 64) (padded rows past t included, as on the
// device), key tiles of 64 up to key_end.
void mirror_forward(const Attn& a, bool causal, double scale, Grads& g) {
  const int t = a.t, d = a.d, rows = flash::kRowsPerBlock, cols = flash::FwdLayout<64>::kCols;
  const double scale_log2 = scale * kLog2e;
  g.out.assign(size_t(t) * d, 0);
  g.lse.assign(t, 0);
  for (int m0 = 0; m0 < t; m0 += rows)
    for (int qi = m0; qi < m0 + rows; ++qi) {
      double m_run = -INFINITY, l_run = 0;
      std::vector<double> o(d, 0);
      for (int n0 = 0; n0 < flash::key_end(m0, rows, t, causal); n0 += cols) {
        std::vector<double> x(cols);
        double mx = -INFINITY;
        for (int j = 0; j < cols; ++j) {
          const int kj = n0 + j;
          x[j] = flash::visible(qi, kj, t, causal) ? dot_rows(a.q, qi, a.k, kj, d) * scale_log2 : -INFINITY;
          mx = std::max(mx, x[j]);
        }
        const double m_new = std::max(m_run, mx);
        const double base = m_new == -INFINITY ? 0.0 : m_new;
        const double alpha = std::exp2(m_run - base);
        double sum = 0;
        for (double& c : o) c *= alpha;
        for (int j = 0; j < cols; ++j) {
          const double pj = std::exp2(x[j] - base);
          REQUIRE_FALSE(std::isnan(pj));
          sum += pj;
          if (n0 + j < t)  // rows of V past t are loaded as zeros
            for (int c = 0; c < d; ++c) o[c] += pj * a.v[size_t(n0 + j) * d + c];
        }
        l_run = l_run * alpha + sum;
        m_run = m_new;
      }
      if (qi >= t) {
        CHECK(l_run == 0.0);  // padded rows see nothing and stay finite
        continue;
      }
      REQUIRE(l_run > 0.0);  // every real row sees at least key 0
      for (int c = 0; c < d; ++c) g.out[size_t(qi) * d + c] = o[c] / l_run;
      g.lse[qi] = (m_run + std::log2(l_run)) * kLn2;
    }
}

// One backward kernel's walk: each block owns `rows` positions of its side (queries for dq, keys for
// dk/dv); each owned position meets the other side's tiles of `step`, from begin(b0) while below
// end(b0). The other side is padded to whole tiles: there p = prob(own, other) must be 0 (masked)
// and the pair is skipped; body(own, other, p) gets every real pair.
void walk_tiles(int t, int rows, int step, const std::function<int(int)>& begin, const std::function<int(int)>& end,
                const std::function<double(int, int)>& prob, const std::function<void(int, int, double)>& body) {
  for (int b0 = 0; b0 < t; b0 += rows)
    for (int own = b0; own < std::min(t, b0 + rows); ++own)
      for (int o0 = begin(b0); o0 < end(b0); o0 += step)
        for (int other = o0; other < o0 + step; ++other) {
          const double p = prob(own, other);
          if (other >= t) {
            REQUIRE(p == 0.0);
            continue;
          }
          body(own, other, p);
        }
}

// flash_bwd_dq_kernel and flash_bwd_dkdv_kernel (query tiles of dkdv_cols), from out and lse.
void mirror_backward(const Attn& a, bool causal, double scale, int dkdv_cols, Grads& g) {
  const int t = a.t, d = a.d, rows = flash::kRowsPerBlock, cols = flash::DqLayout<64>::kCols;
  const double scale_log2 = scale * kLog2e;
  std::vector<double> delta(t, 0);
  for (int i = 0; i < t; ++i) delta[i] = dot_rows(a.dout, i, g.out, i, d);
  auto prob = [&](int qi, int kj) {
    return flash::visible(qi, kj, t, causal) ? std::exp2(dot_rows(a.q, qi, a.k, kj, d) * scale_log2 - g.lse[qi] * kLog2e)
                                             : 0.0;
  };
  g.dq.assign(size_t(t) * d, 0);
  walk_tiles(
      t, rows, cols, [](int) { return 0; }, [&](int m0) { return flash::key_end(m0, rows, t, causal); }, prob,
      [&](int qi, int kj, double p) {
        const double ds = p * (dot_rows(a.dout, qi, a.v, kj, d) - delta[qi]);
        for (int c = 0; c < d; ++c) g.dq[size_t(qi) * d + c] += ds * a.k[size_t(kj) * d + c];
      });
  for (double& x : g.dq) x *= scale;
  g.dk.assign(size_t(t) * d, 0);
  g.dv.assign(size_t(t) * d, 0);
  walk_tiles(
      t, rows, dkdv_cols, [&](int n0) { return flash::query_begin(n0, dkdv_cols, causal); }, [&](int) { return t; },
      [&](int kj, int qi) { return prob(qi, kj); },
      [&](int kj, int qi, double p) {
        const double ds = p * (dot_rows(a.v, kj, a.dout, qi, d) - delta[qi]);
        for (int c = 0; c < d; ++c) {
          g.dv[size_t(kj) * d + c] += p * a.dout[size_t(qi) * d + c];
          g.dk[size_t(kj) * d + c] += ds * a.q[size_t(qi) * d + c];
        }
      });
  for (double& x : g.dk) x *= scale;
}

}  // namespace

TEST_CASE("flash tiling: the kernels' tile loops, run on the host, give attention and its gradients") {
  const int d = 8;  // the loops do not depend on the head dim; 8 keeps the test fast
  const double scale = 1.0 / std::sqrt(double(d));
  uint64_t seed = 500;
  for (int t : {1, 2, 17, 64, 65, 100, 130})
    for (bool causal : {true, false})
      for (int dkdv_cols : {flash::DkvLayout<64>::kCols, flash::DkvLayout<128>::kCols}) {
        CAPTURE(t);
        CAPTURE(causal);
        CAPTURE(dkdv_cols);
        const Attn a = make_attn(t, d, seed += 10);
        const Grads want = reference(a, causal, scale);
        Grads got;
        mirror_forward(a, causal, scale, got);
        mirror_backward(a, causal, scale, dkdv_cols, got);
        kiln::test::check_close(got.out, want.out, 1e-12, 1e-12, "out");
        kiln::test::check_close(got.lse, want.lse, 1e-12, 1e-12, "lse");
        kiln::test::check_close(got.dq, want.dq, 1e-11, 1e-11, "dq");
        kiln::test::check_close(got.dk, want.dk, 1e-11, 1e-11, "dk");
        kiln::test::check_close(got.dv, want.dv, 1e-11, 1e-11, "dv");
      }
}
