// The flash-attention kernels' index math on the CPU (core/cuda/flash_attention_tiling.h): the
// causal tile skipping visits every tile holding a visible (query, key) pair and no tile without
// one, the block order covers every (head, tile) once, and the shared-memory layouts fit and keep
// WMMA's alignment. Runs without a GPU.
#include "test_util.h"

#include <set>
#include <utility>

#include <kiln/core/cuda/flash_attention_tiling.h>

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
  for (int cols : {32, 64})
    for (bool causal : {true, false})
      for (int t : {1, 2, 15, 16, 17, 31, 63, 64, 65, 100, 127, 128, 129, 200, 256, 1000}) {
        CAPTURE(cols);
        CAPTURE(causal);
        CAPTURE(t);
        for (int m0 = 0; m0 < t; m0 += rows) {
          const int end = flash::key_end(m0, rows, t, causal);
          CHECK(end <= t);
          for (int n0 = 0; n0 < t; n0 += cols) {
            const bool visited = n0 < end;
            CHECK_MESSAGE(visited == any_visible(m0, m0 + rows, n0, n0 + cols, t, causal), "m0 ", m0, " n0 ", n0);
          }
        }
      }
}

TEST_CASE("flash tiling: key tiles visit exactly the query tiles with a visible pair") {
  const int rows = flash::kRowsPerBlock;
  for (int cols : {32, 64})
    for (bool causal : {true, false})
      for (int t : {1, 2, 15, 16, 17, 31, 63, 64, 65, 100, 127, 128, 129, 200, 256, 1000}) {
        CAPTURE(cols);
        CAPTURE(causal);
        CAPTURE(t);
        for (int n0 = 0; n0 < t; n0 += rows) {
          const int begin = flash::query_begin(n0, cols, causal);
          CHECK(begin % cols == 0);  // tiles stay aligned at 0
          for (int m0 = 0; m0 < t; m0 += cols) {
            const bool visited = m0 >= begin;
            CHECK_MESSAGE(visited == any_visible(m0, m0 + cols, n0, n0 + rows, t, causal), "n0 ", n0, " m0 ", m0);
          }
        }
      }
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
