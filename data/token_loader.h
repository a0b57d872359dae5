// TokenLoader: (x, y) batches of token windows from a set of shards, split across data-parallel
// ranks, shuffled per epoch, with a resumable cursor. Each window is read from its shard with one
// pread (a shard truncated under the run is an IOError naming the file, not a SIGBUS: Note [Shards
// changed under a run] in token_shard.h); only the current batch is materialised.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/arg.h>
#include <kiln/core/tensor.h>
#include <kiln/data/token_shard.h>

namespace kiln::data {

/// TokenLoaderOptions("data/train_*.bin", /*batch_size=*/8, /*seq_len=*/1024).rank(r).world_size(w).
struct TokenLoaderOptions {
  TokenLoaderOptions(std::string pattern, int64_t batch_size, int64_t seq_len)
      : pattern_(std::move(pattern)), batch_size_(batch_size), seq_len_(seq_len) {}

  KILN_ARG(std::string, pattern);  ///< a glob; the matching files are read in sorted order
  KILN_ARG(int64_t, batch_size);   ///< B, per rank
  KILN_ARG(int64_t, seq_len);      ///< T
  KILN_ARG(int, rank) = 0;
  KILN_ARG(int, world_size) = 1;
  KILN_ARG(uint64_t, seed) = 0;
  KILN_ARG(bool, shuffle) = true;         ///< false: validation order
  KILN_ARG(int64_t, vocab_size) = 0;      ///< 0: unchecked
  /// Batches in page-locked host memory (CUDA builds), so x.to(cuda, /*non_blocking=*/true) is an
  /// asynchronous upload that does not wait for the GPU's queued work (a pageable copy does).
  KILN_ARG(bool, pin_memory) = false;
};

/// One batch of token windows: inputs and their next-token targets.
struct TokenBatch {
  Tensor x;  ///< (B, T) i64: window tokens [0, T)
  Tensor y;  ///< (B, T) i64: window tokens [1, T] (x shifted by one: the next-token targets)
};

/// Note [Token windows and the cursor]
/// The dataset is the sequence of all windows of T+1 tokens with stride T over the shards in
/// sorted order; window i of a shard covers tokens [i*T, i*T + T] and windows never cross a shard
/// boundary (a shard of n tokens has (n - 1) / T windows; the tail is unused). N = total windows.
/// Epoch e visits the N windows in the order perm_e (a Philox-keyed Feistel permutation of [0, N)
/// determined by (seed, e); the identity when shuffle is off). A global step takes the next
/// world_size * B positions of that order, and rank r reads positions
/// [position + r*B, position + (r+1)*B): ranks are disjoint and together cover the global batch.
/// The cursor is {epoch, position}: position counts the windows of epoch e consumed by all ranks
/// together, so it does not depend on the world size. When fewer than world_size * B positions
/// remain, the next call starts epoch e + 1 at position 0 (the tail is dropped, like drop_last).
/// Resuming: set_cursor(cursor()) on a loader with the same shards, T and seed continues with
/// positions [position, ...) under any world size and batch size: every rank of the new world
/// sets the same cursor string, and the global sequence of windows continues exactly where the
/// old world stopped (no window of the epoch is skipped or repeated).
/// Move-only (it owns the shards' mappings and descriptors); not thread-safe: one loader per rank and thread.
class TokenLoader {
 public:
  explicit TokenLoader(TokenLoaderOptions options);

  /// This rank's B windows of the next global batch. Throws IOError naming the file, the byte
  /// offset and the epoch/position when a shard no longer holds a window (changed since open).
  TokenBatch next();

  /// Serialized cursor: "epoch=E position=P windows=N seq_len=T seed=S shuffle=0|1". set_cursor
  /// checks that windows, seq_len, seed and shuffle match this loader (else the positions would
  /// mean other windows) and that position <= N.
  std::string cursor() const;
  void set_cursor(const std::string& cursor);
  void reset() { epoch_ = 0; position_ = 0; }  ///< back to the start (validation passes)

  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }
  int64_t num_windows() const { return num_windows_; }                  ///< N
  int64_t num_tokens() const { return num_tokens_; }                    ///< over all shards
  int64_t batches_per_epoch() const { return num_windows_ / global_batch_; }  ///< global steps
  int64_t global_batch_windows() const { return global_batch_; }       ///< world_size * B
  const std::vector<std::string>& shard_paths() const { return paths_; }
  const TokenLoaderOptions& options() const { return options_; }

  /// The dataset window at `position` of `epoch`'s order, as (shard index, first token).
  std::pair<int64_t, int64_t> window_at(int64_t epoch, int64_t position) const;

 private:
  int64_t permuted(int64_t epoch, int64_t position) const;
  std::string where(int64_t position) const;  ///< "epoch E, window position P, ..." for errors
  void read_window(const TokenShard& shard, int64_t start, int64_t position, uint16_t* out) const;

  TokenLoaderOptions options_;
  std::vector<std::string> paths_;
  std::vector<TokenShard> shards_;
  std::vector<int64_t> window_start_;  ///< (shards + 1,): first global window of each shard
  int64_t num_windows_ = 0;
  int64_t num_tokens_ = 0;
  int64_t global_batch_ = 0;
  int feistel_half_bits_ = 1;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::vector<uint16_t> window_;  ///< (T + 1,): the window next() is copying
};

}  // namespace kiln::data
