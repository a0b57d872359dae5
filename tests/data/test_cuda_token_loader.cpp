// TokenLoader with pin_memory (GPU test: page-locked memory needs the CUDA runtime): the batches
// are pinned, hold the same tokens as the pageable loader's, and upload asynchronously to the
// device with the same values.
#include "data/shard_fixtures.h"
#include "test_util.h"

using namespace kiln;
using namespace kiln::data;

TEST_CASE("pinned token batches equal pageable ones and upload non-blocking") {
  test::require_cuda();
  test::ScratchDir dir;
  write_token_shard(dir.file("train_000000.bin"), test::ramp_tokens(5000, 0));
  write_token_shard(dir.file("train_000001.bin"), test::ramp_tokens(3000, 1));
  auto options = [&](bool pinned) {
    return TokenLoaderOptions(dir.file("train_*.bin"), 4, 33).seed(7).pin_memory(pinned);
  };
  TokenLoader pageable(options(false)), pinned(options(true));
  for (int i = 0; i < 5; ++i) {
    TokenBatch a = pageable.next(), b = pinned.next();
    CHECK_FALSE(a.x.is_pinned());
    REQUIRE(b.x.is_pinned());
    REQUIRE(b.y.is_pinned());
    Tensor dx = b.x.to(Device::cuda(), /*non_blocking=*/true), dy = b.y.to(Device::cuda(), /*non_blocking=*/true);
    CHECK(dx.device().is_cuda());
    CHECK(dx.to(Device::cpu()).to_vector<int64_t>() == a.x.to_vector<int64_t>());
    CHECK(dy.to(Device::cpu()).to_vector<int64_t>() == a.y.to_vector<int64_t>());
  }
  CHECK(pinned.cursor() == pageable.cursor());
}
