// bench_gpt --sharding: the data-parallel GPT step through dist::Trainer in each sharding mode
// (DDP, ZeRO-1, ZeRO-2) on `world` forked CPU ranks (Gloo), timed per step, with each rank's
// persistent bytes per parameter (CPU allocator) after the step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/dtype.h>
#include <kiln/models/gpt.h>
#include <kiln/parallel/sharding.h>

namespace kiln::apps {

struct ShardingBenchOptions {
  models::GPTConfig config;
  int64_t batch = 4, seq = 64;  // per rank
  DType amp = DType::f32;
  int warmup = 2, steps = 5;
  int world = 2;
  int threads_per_rank = 1;
};

struct ShardingTiming {
  dist::Sharding mode = dist::Sharding::none;
  double seconds = 0;            // median step, rank 0 (the ranks step in lockstep)
  double bytes_per_param = 0;    // rank 0's allocated bytes after a step, above the pre-model baseline
  std::string error;
};

// One row per mode, each mode in its own set of forked ranks.
std::vector<ShardingTiming> time_sharding_modes(const ShardingBenchOptions& options,
                                                const std::vector<dist::Sharding>& modes);

}  // namespace kiln::apps
