// ShardLayout: which elements of a flat buffer each rank owns under sharded data parallelism
// (ZeRO-1/2). Pure arithmetic, so it is tested without processes; the sharded optimizer and the
// sharded reducer share one layout so that a reduce-scattered gradient lands where the optimizer
// state of the same elements lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::dist {

/// Note [Padded flat shards]
/// Collectives take equal chunks (NCCL's ncclReduceScatter/ncclAllGather do, and so does Kiln's Gloo
/// group), but a bucket of n elements rarely divides by the world size N. As PyTorch FSDP's flat
/// parameters do, a bucket is padded to N * c elements with c = ceil(n / N): rank r owns elements
/// [r * c, min(n, (r + 1) * c)) and holds a c-element chunk whose tail beyond n is padding (zero in
/// every gradient, never updated). With n < N the last ranks own nothing (an all-padding chunk).
/// Padding is at most N - 1 elements per bucket; the reduce-scatter sends the padded chunks as
/// they are, so every rank issues identical collectives whatever n is.
/// The flat order is DDP's bucket order (reverse registration, capped like DDPOptions' buckets), so
/// a bucket's gradients are complete, and can be reduce-scattered, while backward still runs.
struct ShardBucket {
  std::vector<size_t> params;    ///< parameter indices, in flat order
  std::vector<int64_t> offsets;  ///< each parameter's element offset in the bucket
  int64_t numel = 0;             ///< n: gradient elements in the bucket
  int64_t chunk = 0;             ///< c = ceil(n / N): elements of one rank's chunk (padding included)
  int64_t local_offset = 0;      ///< where this rank's chunk starts in its local (owned) buffer
};

/// One parameter's part of this rank's chunk: elements [begin, end) of the flattened parameter live
/// at `local_offset` of the local buffer (end == begin: this rank owns none of it).
struct ShardPiece {
  int64_t begin = 0, end = 0;
  int64_t local_offset = 0;
  int64_t size() const { return end - begin; }
};

/// Which elements of the flat buffers each rank owns (the file's header).
class ShardLayout {
 public:
  ShardLayout() = default;
  /// `numels` of the parameters in registration order; buckets as compute_bucket_assignment() makes
  /// them for DDP from `tensors` (reverse order, first cap then cap, one dtype/device per bucket).
  ShardLayout(const std::vector<Tensor>& tensors, int rank, int world_size, size_t first_bucket_cap_bytes,
              size_t bucket_cap_bytes);
  /// Explicit buckets (FSDP units): `buckets` lists tensor indices per bucket, every index exactly once.
  ShardLayout(const std::vector<Tensor>& tensors, int rank, int world_size, std::vector<std::vector<size_t>> buckets);

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  const std::vector<ShardBucket>& buckets() const { return buckets_; }
  size_t bucket_of(size_t param) const { return bucket_of_[param]; }
  const ShardPiece& piece(size_t param) const { return pieces_[param]; }
  /// Elements of this rank's local buffer: the sum of its chunks (padding included).
  int64_t local_numel() const { return local_numel_; }
  /// Elements this rank owns (padding excluded), and over all ranks (the parameters' total).
  int64_t owned_numel() const { return owned_numel_; }
  int64_t total_numel() const { return total_numel_; }

  /// Elements [begin, end) of bucket `b` owned by `rank` (any rank, not only this one).
  static std::pair<int64_t, int64_t> owned_range(int64_t numel, int64_t chunk, int rank);

 private:
  void build(const std::vector<Tensor>& tensors, std::vector<std::vector<size_t>> groups);

  int rank_ = 0, world_ = 1;
  std::vector<ShardBucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<ShardPiece> pieces_;
  int64_t local_numel_ = 0, owned_numel_ = 0, total_numel_ = 0;
};

}  // namespace kiln::dist
