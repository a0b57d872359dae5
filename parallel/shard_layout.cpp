// ShardLayout: DDP's bucket assignment, each bucket padded and cut into equal per-rank chunks
// (Note [Padded flat shards]).
#include <kiln/parallel/shard_layout.h>

#include <algorithm>

#include <kiln/core/error.h>
#include <kiln/parallel/bucket.h>

namespace kiln::dist {

std::pair<int64_t, int64_t> ShardLayout::owned_range(int64_t numel, int64_t chunk, int rank) {
  const int64_t begin = std::min(numel, int64_t(rank) * chunk);
  const int64_t end = std::min(numel, (int64_t(rank) + 1) * chunk);
  return {begin, end};
}

ShardLayout::ShardLayout(const std::vector<Tensor>& tensors, int rank, int world_size,
                         size_t first_bucket_cap_bytes, size_t bucket_cap_bytes)
    : rank_(rank), world_(world_size) {
  KILN_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "ShardLayout: rank ", rank, " is not in [0, ",
             world_size, ")");
  std::vector<size_t> reverse(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) reverse[i] = tensors.size() - 1 - i;
  auto groups = compute_bucket_assignment(tensors, reverse, first_bucket_cap_bytes, bucket_cap_bytes);
  bucket_of_.assign(tensors.size(), 0);
  pieces_.assign(tensors.size(), ShardPiece{});
  for (size_t b = 0; b < groups.size(); ++b) {
    ShardBucket bucket;
    bucket.params = std::move(groups[b]);
    for (size_t i : bucket.params) {
      bucket.offsets.push_back(bucket.numel);
      bucket.numel += tensors[i].numel();
      bucket_of_[i] = b;
    }
    bucket.chunk = (bucket.numel + world_size - 1) / world_size;
    bucket.local_offset = local_numel_;
    const auto [lo, hi] = owned_range(bucket.numel, bucket.chunk, rank);
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const int64_t start = bucket.offsets[k], stop = start + tensors[bucket.params[k]].numel();
      ShardPiece piece;
      piece.begin = std::clamp(lo, start, stop) - start;
      piece.end = std::clamp(hi, start, stop) - start;
      if (piece.end < piece.begin) piece.end = piece.begin;
      piece.local_offset = bucket.local_offset + (start + piece.begin - lo);
      pieces_[bucket.params[k]] = piece;
    }
    owned_numel_ += hi - lo;
    total_numel_ += bucket.numel;
    local_numel_ += bucket.chunk;
    buckets_.push_back(std::move(bucket));
  }
}

}  // namespace kiln::dist
