// DistributedSampler: each rank's share of a dataset's indices for one epoch, with the semantics
// of torch.utils.data.DistributedSampler (padding, drop_last, striding, set_epoch reshuffles).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::data {

/// Note [DistributedSampler semantics]
/// As torch.utils.data.DistributedSampler:
///   - shuffle: the N indices are permuted by a generator seeded with seed + epoch (set_epoch);
///     every rank computes the same permutation. Otherwise they stay 0 .. N-1.
///   - drop_last = false: num_samples = ceil(N / world); the list is padded to num_samples * world
///     by repeating its own first entries (cycling when the padding exceeds N).
///   - drop_last = true: when N % world != 0, num_samples = ceil((N - world) / world) (= floor(N / world))
///     and the tail of the list is dropped; otherwise num_samples = N / world.
///   - rank r takes list[r], list[r + world], list[r + 2 * world], ... (num_samples entries).
/// The permutation itself is Kiln's (a Fisher-Yates shuffle driven by Philox keyed by seed + epoch),
/// not torch's Mersenne-Twister randperm: counts, padding and striding match torch, the order does not.
class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int64_t world_size, int64_t rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  /// This rank's indices for the current epoch (num_samples() of them).
  std::vector<int64_t> indices() const;
  int64_t num_samples() const { return num_samples_; }  ///< per rank (torch's len(sampler))
  int64_t total_size() const { return num_samples_ * world_size_; }
  int64_t size() const { return num_samples_; }

  int64_t dataset_size() const { return dataset_size_; }
  int64_t world_size() const { return world_size_; }
  int64_t rank() const { return rank_; }
  bool shuffle() const { return shuffle_; }
  bool drop_last() const { return drop_last_; }

 private:
  int64_t dataset_size_, world_size_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_ = 0;
  int64_t epoch_ = 0;
};

/// 0 .. n-1 shuffled by Fisher-Yates with Philox draws keyed by `seed` (the sampler's permutation).
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed);

}  // namespace kiln::data
