// DataLoader with pin_memory and a CUDA device (GPU test): batches arrive on the device, equal to
// the host loader's, for 0 and 2 workers; the uploads are non-blocking from pinned buffers.
#include "test_util.h"

#include <numeric>

#include <kiln/data/data_loader.h>

using namespace kiln;
using namespace kiln::data;

TEST_CASE("pinned batches uploaded by next() equal the host batches") {
  test::require_cuda();
  auto data = std::make_shared<const Cifar10Dataset>(make_synthetic_cifar10(SyntheticCifarOptions(101).seed(4)));
  std::vector<int64_t> idx(101);
  std::iota(idx.begin(), idx.end(), 0);
  const AugmentOptions aug = AugmentOptions().seed(9);
  for (int64_t workers : {0, 2}) {
    CAPTURE(workers);
    DataLoader host(idx, cifar10_batches(data, aug, 1, 0), DataLoaderOptions(16).num_workers(workers));
    DataLoader gpu(idx, cifar10_batches(data, aug, 1, 0),
                   DataLoaderOptions(16).num_workers(workers).pin_memory(true).device(Device::cuda()));
    int64_t batches = 0;
    while (auto h = host.next()) {
      auto g = gpu.next();
      REQUIRE(g.has_value());
      CHECK(g->index == h->index);
      CHECK(g->indices == h->indices);
      REQUIRE(g->inputs.device().is_cuda());
      REQUIRE(g->targets.device().is_cuda());
      CHECK(test::values(g->inputs) == test::values(h->inputs));
      CHECK(test::values(g->targets) == test::values(h->targets));
      ++batches;
    }
    CHECK_FALSE(gpu.next().has_value());
    CHECK(batches == 7);  // 101 images in batches of 16
  }
}
