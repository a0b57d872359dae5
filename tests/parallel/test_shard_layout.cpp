// ShardLayout (Note [Padded flat shards]) without processes: buckets follow DDP's assignment, each
// rank's chunks tile the padded buckets, pieces of all ranks cover every element exactly once.
#include "test_util.h"

#include <kiln/parallel/shard_layout.h>

using namespace kiln;

TEST_CASE("ShardLayout: every element owned by exactly one rank, chunks padded, world 1 to 5") {
  std::vector<Tensor> params = {zeros({3, 5}), zeros({7}), zeros({1}), zeros({4, 4}), zeros({9})};  // 48 elements
  for (int world = 1; world <= 5; ++world) {
    CAPTURE(world);
    std::vector<int> owner_count(48 + 100, 0);
    for (int r = 0; r < world; ++r) {
      // 64 bytes first, then 80: several buckets.
      dist::ShardLayout layout(params, r, world, 64, 80);
      int64_t local = 0, total = 0;
      for (const auto& b : layout.buckets()) {
        CHECK(b.chunk == (b.numel + world - 1) / world);
        CHECK(b.local_offset == local);
        local += b.chunk;
        total += b.numel;
      }
      CHECK(layout.local_numel() == local);
      CHECK(layout.total_numel() == 48);
      CHECK(total == 48);
      int64_t owned = 0;
      for (size_t p = 0; p < params.size(); ++p) {
        const auto& piece = layout.piece(p);
        CHECK(piece.begin <= piece.end);
        CHECK(piece.end <= params[p].numel());
        owned += piece.size();
        // A global id of each element: parameter offset in registration order.
        int64_t base = 0;
        for (size_t q = 0; q < p; ++q) base += params[q].numel();
        for (int64_t e = piece.begin; e < piece.end; ++e) ++owner_count[size_t(base + e)];
      }
      CHECK(owned == layout.owned_numel());
    }
    for (int64_t e = 0; e < 48; ++e) CHECK_MESSAGE(owner_count[size_t(e)] == 1, "element ", e);
  }
}

TEST_CASE("ShardLayout: fewer elements than ranks leaves the last ranks owning nothing") {
  std::vector<Tensor> params = {zeros({2})};
  dist::ShardLayout r0(params, 0, 4, 1 << 20, 1 << 20), r3(params, 3, 4, 1 << 20, 1 << 20);
  CHECK(r0.buckets()[0].chunk == 1);
  CHECK(r0.owned_numel() == 1);
  CHECK(r3.owned_numel() == 0);
  CHECK(r3.local_numel() == 1);  // an all-padding chunk: every rank issues the same collectives
  CHECK(r3.piece(0).size() == 0);
}
