// Sharding modes of the data-parallel Trainer (TrainerOptions::sharding, train_gpt --sharding), and
// the wrapping of a user's optimizer into a ShardedOptimizer of the same kind.
#pragma once

#include <memory>
#include <string>

#include <kiln/optim/optimizer.h>
#include <kiln/parallel/process_group.h>
#include <kiln/parallel/sharded_optimizer.h>

namespace kiln::dist {

enum class Sharding {
  none,   ///< DDP: parameters, gradients and optimizer state replicated
  zero1,  ///< optimizer state sharded (ShardedOptimizer over DDP's all-reduced gradients)
  zero2,  ///< optimizer state and gradients sharded (ShardedReducer's reduce-scatter per bucket)
  full,   ///< FSDP / ZeRO-3: parameters sharded too (FullyShardedDataParallel, fsdp.h)
};

const char* sharding_name(Sharding s);  ///< "none", "zero1", "zero2", "full"
/// Parses sharding_name()'s strings; fails listing them.
Sharding parse_sharding(const std::string& name);

/// A ShardedOptimizer that does what `like` (an SGD or AdamW, not stepped yet) would: the same
/// kind, groups, hyper-parameters and initial_lr, over the same parameters.
std::shared_ptr<ShardedOptimizer> shard_optimizer(const optim::Optimizer& like, std::shared_ptr<ProcessGroup> group,
                                                  ShardedOptimizerOptions options = {});

}  // namespace kiln::dist
