// The index math of the CUDA elementwise engine, run on the CPU (it is plain host code there):
// IntDivider against '/', dim coalescing, linear index -> per-operand offsets against a walk
// of the original shape and strides, and the split of big loops into 32-bit pieces.
#include "test_util.h"

#include <kiln/core/cuda/plan/elementwise_offsets.h>

#include <random>

using namespace kiln;
using kiln::cuda::coalesce;
using kiln::cuda::for_each_piece;
using kiln::cuda::IntDivider;
using kiln::cuda::Loop;
using kiln::cuda::make_offset_calculator;

namespace {

// Offsets of every element in row-major order, walking the (uncoalesced) shape and strides.
template <int N>
std::vector<std::array<int64_t, N>> walk(const std::vector<int64_t>& shape,
                                         const std::array<std::vector<int64_t>, N>& strides) {
  std::vector<std::array<int64_t, N>> out;
  test::for_each_index(Shape(shape.begin(), shape.end()), [&](const std::vector<int64_t>& idx) {
    std::array<int64_t, N> o{};
    for (int k = 0; k < N; ++k)
      for (size_t d = 0; d < idx.size(); ++d) o[k] += idx[d] * strides[k][d];
    out.push_back(o);
  });
  return out;
}

// The same list through coalesce + pieces + OffsetCalculator, as the CUDA launcher computes it.
template <int N>
std::vector<std::array<int64_t, N>> via_calculator(const std::vector<int64_t>& shape,
                                                   const std::array<std::vector<int64_t>, N>& strides,
                                                   int64_t max_numel = cuda::kMaxPieceNumel,
                                                   int max_dims = cuda::kMaxLoopDims) {
  std::vector<std::array<int64_t, N>> out;
  Loop<N> loop = coalesce<N>(shape, strides);
  for_each_piece<N>(
      loop,
      [&](const Loop<N>& piece, const std::array<int64_t, N>& base) {
        CHECK(piece.numel() <= max_numel);
        CHECK(piece.dims() <= max_dims);
        auto calc = make_offset_calculator<N>(piece);
        for (int64_t i = 0; i < piece.numel(); ++i) {
          cuda::Offsets<N> o = calc.get(static_cast<uint32_t>(i));
          std::array<int64_t, N> a;
          for (int k = 0; k < N; ++k) a[k] = base[k] + o.v[k];
          out.push_back(a);
        }
      },
      max_numel, max_dims);
  return out;
}

}  // namespace

TEST_CASE("IntDivider divides like '/' for every 31-bit numerator it is given") {
  std::mt19937 rng(7);
  std::vector<int64_t> divisors = {1, 2, 3, 5, 6, 7, 10, 17, 255, 256, 257, 1000, 65535, 65536, 65537, 1 << 20,
                                   (1 << 20) + 1, 12345678, (1LL << 30) - 1, 1LL << 30, (1LL << 30) + 1, INT32_MAX - 1,
                                   INT32_MAX};
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + rng() % INT32_MAX);
  for (int64_t d : divisors) {
    CAPTURE(d);
    IntDivider div(d);
    std::vector<int64_t> ns = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, INT32_MAX, INT32_MAX - 1, INT32_MAX - d};
    for (int i = 0; i < 200; ++i) ns.push_back(rng() % (int64_t(INT32_MAX) + 1));
    for (int i = 0; i < 50; ++i) ns.push_back(int64_t(rng() % 1000) * d + rng() % d);  // near multiples
    for (int64_t n : ns) {
      if (n < 0 || n > INT32_MAX) continue;
      CAPTURE(n);
      REQUIRE(div.div(static_cast<uint32_t>(n)) == static_cast<uint32_t>(n / d));
    }
  }
  // Every numerator below 2^16 for small divisors.
  for (int64_t d = 1; d <= 70; ++d) {
    IntDivider div(d);
    for (uint32_t n = 0; n < (1u << 16); ++n) REQUIRE(div.div(n) == n / d);
  }
}

TEST_CASE("coalesce merges dense and broadcast runs and keeps the rest") {
  // Contiguous operands: one flat run.
  Loop<2> flat = coalesce<2>({2, 3, 4}, {{{12, 4, 1}, {12, 4, 1}}});
  CHECK(flat.sizes == std::vector<int64_t>{24});
  CHECK(flat.contiguous());
  // (3,1,5) x (4,5) broadcast to (3,4,5): the inner 5 is dense everywhere, 4 and 3 differ.
  Loop<3> bc = coalesce<3>({3, 4, 5}, {{{20, 5, 1}, {5, 0, 1}, {0, 5, 1}}});
  CHECK(bc.sizes == std::vector<int64_t>{5, 4, 3});
  CHECK(bc.strides[1] == std::vector<int64_t>{1, 0, 5});
  CHECK(bc.strides[2] == std::vector<int64_t>{1, 5, 0});
  CHECK_FALSE(bc.contiguous());
  // A scalar broadcast over a dense tensor: stride-0 dims merge with each other.
  Loop<2> sc = coalesce<2>({4, 6}, {{{6, 1}, {0, 0}}});
  CHECK(sc.sizes == std::vector<int64_t>{24});
  CHECK(sc.strides[1] == std::vector<int64_t>{0});
  // Size-1 dims vanish whatever their strides; a one-element loop has no dims.
  Loop<2> ones = coalesce<2>({1, 5, 1}, {{{99, 1, 7}, {3, 2, 1}}});
  CHECK(ones.sizes == std::vector<int64_t>{5});
  CHECK(ones.strides[1] == std::vector<int64_t>{2});
  Loop<1> one = coalesce<1>({1, 1}, {{{5, 3}}});
  CHECK(one.dims() == 0);
  CHECK(one.numel() == 1);
  CHECK(one.contiguous());
  // A transposed operand stops every merge.
  Loop<2> tr = coalesce<2>({3, 4}, {{{4, 1}, {1, 3}}});
  CHECK(tr.sizes == std::vector<int64_t>{4, 3});
}

TEST_CASE("offsets from the calculator match a walk of shape and strides") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    CAPTURE(trial);
    const int nd = 1 + rng() % 7;
    std::vector<int64_t> shape(nd);
    for (auto& s : shape) s = 1 + rng() % 4;
    // Operand 0 dense (an output), operand 1 permuted/sliced, operand 2 broadcast in random dims.
    std::array<std::vector<int64_t>, 3> strides;
    int64_t st = 1;
    strides[0].assign(nd, 0);
    for (int d = nd - 1; d >= 0; --d) {
      strides[0][d] = st;
      st *= shape[d];
    }
    strides[1].assign(nd, 0);
    strides[2].assign(nd, 0);
    for (int d = 0; d < nd; ++d) {
      strides[1][d] = int64_t(rng() % 50) * ((rng() % 5 == 0) ? 3000000000LL : 1);  // int64 offsets
      strides[2][d] = (rng() % 3 == 0) ? 0 : strides[0][d];
    }
    auto expected = walk<3>(shape, strides);
    CHECK(via_calculator<3>(shape, strides) == expected);
    // Small pieces and few dims per launch exercise every split path.
    for (int64_t max_numel : {1, 2, 3, 7, 16}) {
      CAPTURE(max_numel);
      CHECK(via_calculator<3>(shape, strides, max_numel) == expected);
    }
    for (int max_dims : {1, 2, 3}) {
      CAPTURE(max_dims);
      CHECK(via_calculator<3>(shape, strides, cuda::kMaxPieceNumel, max_dims) == expected);
      CHECK(via_calculator<3>(shape, strides, 5, max_dims) == expected);
    }
  }
}

TEST_CASE("loops of more than 8 unmergeable dims are peeled into launches of 8") {
  // 11 dims of 2, reversed strides for operand 1: nothing merges.
  std::vector<int64_t> shape(11, 2);
  std::array<std::vector<int64_t>, 2> strides;
  for (int d = 0; d < 11; ++d) {
    strides[0].push_back(int64_t(1) << (10 - d));
    strides[1].push_back(int64_t(1) << d);
  }
  Loop<2> loop = coalesce<2>(shape, strides);
  REQUIRE(loop.dims() == 11);
  int pieces = 0;
  for_each_piece<2>(loop, [&](const Loop<2>& piece, const std::array<int64_t, 2>&) {
    CHECK(piece.dims() == cuda::kMaxLoopDims);
    ++pieces;
  });
  CHECK(pieces == 8);  // the 3 outer dims peeled
  CHECK(via_calculator<2>(shape, strides) == walk<2>(shape, strides));
}

TEST_CASE("loops past 2^31 elements split into 32-bit pieces with int64 bases") {
  // One dense dim of 5 * 2^30 elements: pieces of INT32_MAX, then the rest.
  {
    Loop<2> loop = coalesce<2>({5, 1LL << 30}, {{{1LL << 30, 1}, {1LL << 30, 1}}});
    REQUIRE(loop.dims() == 1);
    int64_t next = 0, pieces = 0;
    for_each_piece<2>(loop, [&](const Loop<2>& piece, const std::array<int64_t, 2>& base) {
      CHECK(piece.numel() <= INT32_MAX);
      CHECK(base[0] == next);
      CHECK(base[1] == next);
      next += piece.numel();
      ++pieces;
    });
    CHECK(next == 5LL << 30);
    CHECK(pieces == 3);
  }
  // A transposed (3, 2^31 + 5): each outer step is itself too big and is cut again.
  {
    const int64_t big = (1LL << 31) + 5;
    Loop<2> loop = coalesce<2>({3, big}, {{{big, 1}, {1, 3}}});
    REQUIRE(loop.dims() == 2);
    std::vector<std::array<int64_t, 2>> bases;
    int64_t total = 0;
    for_each_piece<2>(loop, [&](const Loop<2>& piece, const std::array<int64_t, 2>& base) {
      CHECK(piece.numel() <= INT32_MAX);
      bases.push_back(base);
      total += piece.numel();
    });
    CHECK(total == 3 * big);
    REQUIRE(bases.size() == 6);
    CHECK(bases[1] == std::array<int64_t, 2>{INT32_MAX, 3LL * INT32_MAX});
    CHECK(bases[2] == std::array<int64_t, 2>{big, 1});
    CHECK(bases[5] == std::array<int64_t, 2>{2 * big + INT32_MAX, 2 + 3LL * INT32_MAX});
  }
  // The largest piece: the last index decomposes correctly.
  {
    Loop<2> loop = coalesce<2>({32767, 65536}, {{{65536, 1}, {1, 40000}}});
    auto calc = make_offset_calculator<2>(loop);
    const int64_t n = loop.numel();
    REQUIRE(n < INT32_MAX);
    for (int64_t i : {n - 1, n - 2, n / 2, int64_t(65536), int64_t(65535), int64_t(0)}) {
      cuda::Offsets<2> o = calc.get(static_cast<uint32_t>(i));
      CHECK(o.v[0] == i);
      CHECK(o.v[1] == (i / 65536) + (i % 65536) * 40000);
    }
  }
}
