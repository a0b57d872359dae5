// DataLoader: batches equal a sequential gather, in order, for 0, 1 and 3 workers; the bounded
// window holds back workers; destroying it early does not hang; a worker's exception reaches
// the consumer as kiln::Error.
#include "test_util.h"

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/data/data_loader.h>
#include <kiln/data/sampler.h>

using namespace kiln;
using namespace kiln::data;

namespace {

std::shared_ptr<const Cifar10Dataset> small_set() {
  static auto d = std::make_shared<const Cifar10Dataset>(make_synthetic_cifar10(SyntheticCifarOptions(103).seed(2)));
  return d;
}

}  // namespace

TEST_CASE("batches equal a sequential gather, in order, for any number of workers") {
  auto data = small_set();
  DistributedSampler sampler(data->size(), 2, 1, true, 11);
  sampler.set_epoch(3);
  const std::vector<int64_t> idx = sampler.indices();  // 52 indices
  AugmentOptions aug = AugmentOptions().seed(5);
  for (int64_t workers : {0, 1, 3}) {
    CAPTURE(workers);
    DataLoader loader(idx, cifar10_batches(data, aug, 3, 1), DataLoaderOptions(8).num_workers(workers).prefetch(2));
    CHECK(loader.num_batches() == 7);
    int64_t b = 0;
    while (auto batch = loader.next()) {
      const int64_t begin = b * 8, end = std::min<int64_t>(begin + 8, 52);
      std::vector<int64_t> want(idx.begin() + begin, idx.begin() + end);
      CHECK(batch->index == b);
      CHECK(batch->indices == want);
      Tensor ref = augment_gather(*data, want, 3, 1, aug);
      CHECK(batch->inputs.shape() == ref.shape());
      CHECK(batch->inputs.to_vector<float>() == ref.to_vector<float>());
      std::vector<int64_t> labels;
      for (int64_t i : want) labels.push_back(data->labels.data<int64_t>()[i]);
      CHECK(batch->targets.to_vector<int64_t>() == labels);
      ++b;
    }
    CHECK(b == 7);
    CHECK_FALSE(loader.next().has_value());
  }
  DataLoader dropped(idx, cifar10_batches(data, aug, 3, 1), DataLoaderOptions(8).drop_last(true));
  CHECK(dropped.num_batches() == 6);
}

TEST_CASE("workers stay within the prefetch window") {
  std::vector<int64_t> idx(40);
  std::iota(idx.begin(), idx.end(), 0);
  std::atomic<int64_t> built{0};
  auto fn = [&](std::span<const int64_t> part) {
    built++;
    Batch b;
    b.inputs = from_vector(std::vector<int64_t>(part.begin(), part.end()), {static_cast<int64_t>(part.size())});
    return b;
  };
  // Waits (up to 10 s on a loaded machine) for `n` batches, then gives workers time to overshoot.
  auto settle = [&](int64_t n) {
    for (int i = 0; i < 1000 && built.load() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  };
  DataLoader loader(idx, fn, DataLoaderOptions(4).num_workers(3).prefetch(2));
  settle(2);
  CHECK(built.load() == 2);  // batches 0 and 1 only, although 3 workers wait
  auto first = loader.next();
  REQUIRE(first.has_value());
  CHECK(first->inputs.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  settle(3);
  CHECK(built.load() == 3);
}

TEST_CASE("destroying the loader before the end does not hang") {
  auto data = small_set();
  std::vector<int64_t> idx(100);
  std::iota(idx.begin(), idx.end(), 0);
  auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < 5; ++round) {
    DataLoader loader(idx, cifar10_batches(data, AugmentOptions(), 0, 0), DataLoaderOptions(4).num_workers(3));
    if (round > 0) {
      auto b = loader.next();
      CHECK(b.has_value());
    }
  }  // destructors join with most batches unread
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

TEST_CASE("a worker's exception surfaces in next() as kiln::Error, and keeps surfacing") {
  std::vector<int64_t> idx(30);
  std::iota(idx.begin(), idx.end(), 0);
  auto fn = [](std::span<const int64_t> part) {
    if (part[0] == 12) throw std::runtime_error("disk on fire");
    Batch b;
    b.inputs = zeros({1});
    return b;
  };
  for (int64_t workers : {0, 2}) {
    CAPTURE(workers);
    DataLoader loader(idx, fn, DataLoaderOptions(4).num_workers(workers));
    for (int i = 0; i < 3; ++i) CHECK(loader.next().has_value());
    CHECK_ERROR_CONTAINS(loader.next(), "batch 3", "disk on fire");
    CHECK_ERROR_CONTAINS(loader.next(), "batch 3", "disk on fire");
  }
  // Through the CIFAR batch builder: an index outside the dataset.
  std::vector<int64_t> bad{0, 1, 500};
  DataLoader loader(bad, cifar10_batches(small_set(), AugmentOptions(), 0, 0), DataLoaderOptions(2).num_workers(1));
  CHECK(loader.next().has_value());
  CHECK_ERROR_CONTAINS(loader.next(), "batch 1", "index 500");
}

TEST_CASE("invalid options name the value") {
  std::vector<int64_t> idx{0};
  auto fn = [](std::span<const int64_t>) { return Batch{}; };
  CHECK_ERROR_CONTAINS(DataLoader(idx, fn, DataLoaderOptions(0)), "batch_size must be >= 1, got 0");
  CHECK_ERROR_CONTAINS(DataLoader(idx, fn, DataLoaderOptions(1).prefetch(0)), "prefetch must be >= 1, got 0");
}

TEST_CASE("pin_memory and a CUDA device need a usable GPU: a clear error without one") {
  if (cuda::device_count() > 0) return;  // tests/data/test_cuda_data_loader.cpp covers the GPU
  std::vector<int64_t> idx{0, 1};
  auto fn = cifar10_batches(small_set(), AugmentOptions(), 0, 0);
  CHECK_ERROR_CONTAINS(DataLoader(idx, fn, DataLoaderOptions(1).pin_memory(true)), "pin_memory needs a usable CUDA device");
  CHECK_ERROR_CONTAINS(DataLoader(idx, fn, DataLoaderOptions(1).device(Device::cuda())),
                       "a CUDA device needs a usable CUDA device");
}
