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
  build(tensors, compute_bucket_assignment(tensors, reverse, first_bucket_cap_bytes, bucket_cap_bytes));
}

ShardLayout::ShardLayout(const std::vector<Tensor>& tensors, int rank, int world_size,
                         std::vector<std::vector<size_t>> buckets)
    : rank_(rank), world_(world_size) {
  KILN_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "ShardLayout: rank ", rank, " is not in [0, ",
             world_size, ")");
  std::vector<int> seen(tensors.size(), 0);
  for (size_t b = 0; b < buckets.size(); ++b) {
    KILN_CHECK(!buckets[b].empty(), "ShardLayout: explicit bucket ", b, " is empty");
    for (size_t i : buckets[b]) {
      KILN_CHECK(i < tensors.size(), "ShardLayout: explicit bucket ", b, " names tensor ", i, " of ", tensors.size());
      KILN_CHECK(seen[i]++ == 0, "ShardLayout: tensor ", i, " is in two explicit buckets");
      KILN_CHECK(tensors[i].dtype() == tensors[buckets[b].front()].dtype() &&
                     tensors[i].device() == tensors[buckets[b].front()].device(),
                 "ShardLayout: explicit bucket ", b, " mixes dtypes or devices (tensor ", i, ")");
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i)
    KILN_CHECK(seen[i] == 1, "ShardLayout: tensor ", i, " is in no explicit bucket");
  build(tensors, std::move(buckets));
}

void ShardLayout::build(const std::vector<Tensor>& tensors, std::vector<std::vector<size_t>> groups) {
  const int world_size = world_, rank = rank_;
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
