// DistributedSampler (Note [DistributedSampler semantics] in sampler.h) and the seeded
// permutation it shuffles with.
#include <kiln/data/sampler.h>

#include <algorithm>
#include <numeric>

#include <kiln/core/error.h>
#include <kiln/core/generator.h>

namespace kiln::data {

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed) {
  KILN_CHECK(n >= 0, "random_permutation: n must be >= 0, got ", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = std::min<int64_t>(static_cast<int64_t>(philox_uniform(seed, static_cast<uint64_t>(i)) * (i + 1)), i);
    std::swap(p[i], p[j]);
  }
  return p;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t world_size, int64_t rank, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size), world_size_(world_size), rank_(rank), shuffle_(shuffle), seed_(seed),
      drop_last_(drop_last) {
  KILN_CHECK(dataset_size >= 0, "DistributedSampler: dataset_size must be >= 0, got ", dataset_size);
  KILN_CHECK(world_size >= 1, "DistributedSampler: world_size must be >= 1, got ", world_size);
  KILN_CHECK(rank >= 0 && rank < world_size, "DistributedSampler: invalid rank ", rank, ", rank should be in [0, ",
             world_size - 1, "]");
  if (drop_last && dataset_size % world_size != 0) {
    // torch: math.ceil((N - world) / world), i.e. floor(N / world) (0 when N < world).
    num_samples_ = dataset_size / world_size;
  } else {
    num_samples_ = (dataset_size + world_size - 1) / world_size;
  }
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  if (shuffle_) {
    all = random_permutation(dataset_size_, seed_ + static_cast<uint64_t>(epoch_));
  } else {
    all.resize(static_cast<size_t>(dataset_size_));
    std::iota(all.begin(), all.end(), int64_t{0});
  }
  const int64_t total = total_size();
  if (!drop_last_) {
    // Pad with the list's own first entries, cycling when the padding exceeds N (as torch).
    const int64_t n = dataset_size_;
    for (int64_t k = 0; static_cast<int64_t>(all.size()) < total; ++k) all.push_back(all[static_cast<size_t>(k % n)]);
  } else {
    all.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(all[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace kiln::data
