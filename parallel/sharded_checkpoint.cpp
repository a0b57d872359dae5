// Sharded checkpoints: Note [Sharded checkpoint files].
#include <kiln/parallel/sharded_checkpoint.h>

#include <filesystem>

#include <kiln/core/factory.h>
#include <kiln/core/io/safetensors.h>

namespace kiln::dist {

namespace {

constexpr const char* kShardFormat = "kiln.optimizer_shard";

std::string meta_at(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata.find(key);
  KILN_CHECK_IO(it != f.metadata.end(), "sharded checkpoint: ", f.path, ": metadata '", key, "' is missing");
  return it->second;
}

}  // namespace

std::string shard_path(const std::string& path, int rank, int world_size) {
  return path + ".shard-" + std::to_string(rank) + "-of-" + std::to_string(world_size);
}

void save_sharded_checkpoint(const std::string& path, const optim::NamedTensors& model, ShardedOptimizer& optimizer,
                             const optim::TrainingProgress& progress, ProcessGroup& group) {
  const int rank = group.rank(), world = group.size();
  auto any_failed = [&](bool failed) {
    Tensor flag = full({1}, failed ? 1.0 : 0.0, TensorOptions(DType::f32).device(group.device()));
    group.allreduce(flag, AllreduceOptions().op(ReduceOp::max))->wait();
    return flag.item() > 0;
  };
  std::string failure;
  try {
    std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    save_safetensors(shard_path(path, rank, world), optimizer.local_state_dict(),
                     {{"format", kShardFormat},
                      {"rank", std::to_string(rank)},
                      {"world_size", std::to_string(world)},
                      {"global_step", std::to_string(progress.global_step)}});
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (any_failed(!failure.empty())) {
    if (!failure.empty()) throw IOError(failure);
    KILN_FAIL_IO("save_sharded_checkpoint: another rank failed to write its shard of ", path);
  }
  if (rank == 0) {
    try {
      optim::NamedTensors groups;
      for (const auto& [k, t] : optimizer.local_state_dict())
        if (k.rfind("param_groups.", 0) == 0) groups.emplace_back(k, t);
      optim::TrainingProgress index = progress;
      index.extra.emplace_back(kOptimizerShardsKey, scalar_tensor(double(world), DType::i64));
      optim::save_checkpoint(path, model, groups, optimizer.name(), index);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  if (any_failed(!failure.empty())) {
    if (!failure.empty()) throw IOError(failure);
    KILN_FAIL_IO("save_sharded_checkpoint: rank 0 failed to write the index ", path);
  }
}

std::optional<optim::NamedTensors> read_optimizer_shards(const std::string& path, optim::TrainingProgress& progress) {
  auto it = std::find_if(progress.extra.begin(), progress.extra.end(),
                         [](const auto& e) { return e.first == kOptimizerShardsKey; });
  if (it == progress.extra.end()) return std::nullopt;
  const int64_t world = static_cast<int64_t>(it->second.item());
  progress.extra.erase(it);
  KILN_CHECK_IO(world >= 1 && world <= 1 << 20, "sharded checkpoint ", path, ": 'optimizer_shards' is ", world);
  std::vector<optim::NamedTensors> shards;
  for (int r = 0; r < world; ++r) {
    const std::string file = shard_path(path, r, int(world));
    KILN_CHECK_IO(std::filesystem::is_regular_file(file), "sharded checkpoint ", path, ": shard ", r, " of ", world,
                  " is missing (", file, ")");
    SafetensorsFile f = load_safetensors(file);
    KILN_CHECK_IO(meta_at(f, "format") == kShardFormat && meta_at(f, "rank") == std::to_string(r) &&
                      meta_at(f, "world_size") == std::to_string(world),
                  "sharded checkpoint ", file, ": not shard ", r, " of ", world);
    KILN_CHECK_IO(meta_at(f, "global_step") == std::to_string(progress.global_step), "sharded checkpoint ", file,
                  ": written at step ", meta_at(f, "global_step"), " but the index is at step ", progress.global_step);
    shards.push_back(std::move(f.tensors));
  }
  return ShardedOptimizer::merge_local_state_dicts(shards);
}

}  // namespace kiln::dist
