// Sharded checkpoints: each rank writes its ShardedOptimizer's shard, rank 0 writes the index last,
// and a reader at any world size and in any mode (DDP included) assembles the full optimizer state
// from the shards. Note [Sharded checkpoint files].
#pragma once

#include <optional>
#include <string>

#include <kiln/optim/checkpoint.h>
#include <kiln/parallel/sharded_optimizer.h>

namespace kiln::dist {

/// Note [Sharded checkpoint files]
/// A sharded checkpoint at PATH (e.g. dir/step_100.safetensors) is N + 1 files:
///   `PATH.shard-<r>-of-<N>`  rank r's ShardedOptimizer::local_state_dict(), safetensors, with
///                            metadata format "kiln.optimizer_shard", rank, world_size, global_step
///   `PATH`                   the index: an ordinary Kiln checkpoint (optim/checkpoint.h) with the
///                            model, the progress and the optimizer's parameter groups but no
///                            per-parameter state, and extra "optimizer_shards" (0-dim i64) = N
/// Every file is written atomically (tmp, fsync, rename); the shards first, then, after every rank
/// reported success, the index. A crash therefore leaves either no new index (the previous
/// checkpoint is still the latest) or a complete set. Loading reads the index like any checkpoint
/// (so it restores the weights and progress, and leaves the optimizer without state), then reads
/// all N shards, checks they belong to that step and cover every parameter element they claim, and
/// loads the merged full state: any world size, any mode. (The merged state is built in full on
/// every loading rank before it keeps its slices: memory for one copy of the optimizer state.)
inline constexpr const char* kOptimizerShardsKey = "optimizer_shards";

std::string shard_path(const std::string& path, int rank, int world_size);

/// Collective. Throws IOError on every rank when some rank failed to write.
void save_sharded_checkpoint(const std::string& path, const optim::NamedTensors& model, ShardedOptimizer& optimizer,
                             const optim::TrainingProgress& progress, ProcessGroup& group);

/// When `progress` (what optim::load_checkpoint read from the index at `path`) names optimizer shards,
/// the full optimizer state merged from them, with "optimizer_shards" removed from progress.extra;
/// nullopt for an ordinary checkpoint.
std::optional<optim::NamedTensors> read_optimizer_shards(const std::string& path, optim::TrainingProgress& progress);

}  // namespace kiln::dist
