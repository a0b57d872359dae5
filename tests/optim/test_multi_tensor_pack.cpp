// The table packing behind the fused CUDA optimizer, clipping and GradScaler kernels
// (core/cuda/kernels/multi_tensor.h, Note [Multi-tensor table]), checked on the CPU: every chunk of every
// non-empty tensor lands in exactly one block of exactly one launch, no table overflows, and a
// tensor cut by a full table continues in the next one.
#include "test_util.h"

#include <map>
#include <utility>
#include <vector>

#include <kiln/core/cuda/kernels/multi_tensor.h>

using namespace kiln;
namespace mt = kiln::cuda::mt;

namespace {

struct Flush {
  int blocks;
  std::vector<std::pair<int64_t, int64_t>> chunks;  // (tensor, chunk) of each block
};

// Packs tensors of `sizes` into Table and checks the result against Note [Multi-tensor table].
template <class Table>
std::vector<Flush> pack(const std::vector<int64_t>& sizes) {
  std::vector<Flush> flushes;
  // Distinct fake addresses per (list, tensor) so the copied slot can be checked too.
  auto address = [](int d, int64_t i) { return reinterpret_cast<void*>(static_cast<uintptr_t>((i + 1) * 16 + d)); };
  mt::pack_and_flush<Table>(
      static_cast<int64_t>(sizes.size()), [&](int64_t i) { return sizes[i]; },
      [&](Table& tab, int slot, int64_t i) {
        REQUIRE(slot >= 0);
        REQUIRE(slot < Table::max_tensors);
        for (int d = 0; d < Table::depth; ++d) tab.ptr[d][slot] = address(d, i);
        tab.meta[slot] = i;
      },
      [&](const Table& tab, int blocks) {
        REQUIRE(blocks > 0);
        REQUIRE(blocks <= Table::max_blocks);
        Flush f{blocks, {}};
        for (int b = 0; b < blocks; ++b) {
          const int slot = tab.block_tensor[b];
          REQUIRE(slot < Table::max_tensors);
          const int64_t i = tab.meta[slot];
          REQUIRE(i >= 0);
          REQUIRE(i < static_cast<int64_t>(sizes.size()));
          CHECK(tab.numel[slot] == sizes[i]);
          for (int d = 0; d < Table::depth; ++d) CHECK(tab.ptr[d][slot] == address(d, i));
          const int64_t c = tab.block_chunk[b];
          CHECK(c >= 0);
          CHECK(c < mt::chunk_count(sizes[i]));
          f.chunks.emplace_back(i, c);
        }
        flushes.push_back(f);
      });
  std::map<std::pair<int64_t, int64_t>, int> seen;
  for (const Flush& f : flushes)
    for (const auto& tc : f.chunks) ++seen[tc];
  int64_t expected = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    expected += mt::chunk_count(sizes[i]);
    for (int64_t c = 0; c < mt::chunk_count(sizes[i]); ++c) {
      const int times = seen[std::make_pair(static_cast<int64_t>(i), c)];
      CHECK_MESSAGE(times == 1, "tensor ", i, " chunk ", c);
    }
  }
  CHECK(static_cast<int64_t>(seen.size()) == expected);
  return flushes;
}

}  // namespace

TEST_CASE("chunk_count") {
  CHECK(mt::chunk_count(0) == 0);
  CHECK(mt::chunk_count(1) == 1);
  CHECK(mt::chunk_count(mt::kChunkSize) == 1);
  CHECK(mt::chunk_count(mt::kChunkSize + 1) == 2);
  CHECK(mt::chunk_count(int64_t(1) << 40) == (int64_t(1) << 40) / mt::kChunkSize);
}

TEST_CASE("every chunk in exactly one block, with small tables") {
  using Table = mt::TensorTable<3, int64_t, 3, 5>;
  const int64_t k = mt::kChunkSize;
  const std::vector<std::vector<int64_t>> lists = {
      {},
      {0, 0},
      {1},
      {1, 2, 3},                              // exactly a full table of tensors
      {1, 2, 3, 4},                           // one more than a table holds
      {5 * k},                                // exactly a full table of blocks
      {5 * k + 1},                            // a tensor cut by a full table
      {17 * k - 3, 1, 0, k, k + 1, 2, 3, 0},  // cut several times, then mixed
      {1, 1, 3 * k, 1, 1, 1, 7 * k + 5, k - 1},
  };
  for (const auto& sizes : lists) {
    CAPTURE(sizes.size());
    pack<Table>(sizes);
  }
}

TEST_CASE("a tensor cut by a full table continues as slot 0 of the next") {
  using Table = mt::TensorTable<1, int64_t, 4, 4>;
  const int64_t k = mt::kChunkSize;
  std::vector<Flush> f = pack<Table>({1, 6 * k});
  // blocks: (0,0) (1,0) (1,1) (1,2) | (1,3) (1,4) (1,5)
  REQUIRE(f.size() == 2);
  CHECK(f[0].blocks == 4);
  CHECK(f[1].blocks == 3);
  CHECK(f[1].chunks.front() == std::make_pair(int64_t(1), int64_t(3)));
}

TEST_CASE("the kernels' real table sizes: many tensors, some over a chunk, over 320 blocks") {
  using AdamWTable = mt::TensorTable<5, int64_t, 36, 320>;
  using GradTable = mt::TensorTable<1, int64_t, 110, 320>;
  std::vector<int64_t> sizes;
  for (int i = 0; i < 150; ++i) sizes.push_back((i * 37) % 1000 + (i % 3 == 0 ? 0 : 1));
  sizes.push_back(330 * mt::kChunkSize + 11);
  sizes.push_back(1);
  sizes.push_back(mt::kChunkSize);
  std::vector<Flush> f = pack<AdamWTable>(sizes);
  CHECK(f.size() >= 5);  // 150 small tensors need 5 tables of 36, the big one a second table of blocks
  pack<GradTable>(sizes);
}
