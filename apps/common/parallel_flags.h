// The data-parallel flags train_gpt and train_cifar share, applied to a dist::Trainer the same way
// in both: --sharding, --sharded-checkpoints, --bucket-cap-mb, the mixed-precision policy's
// --param-dtype / --reduce-dtype, and --comm-hook with PowerSGD's --powersgd-rank / --powersgd-start.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include <kiln/parallel/trainer.h>

namespace kiln::apps {

struct ParallelFlags {
  std::string sharding = "none";
  bool sharded_checkpoints = false;
  double bucket_cap_mb = 25;
  std::string comm_hook = "none";
  int powersgd_rank = 4;
  int64_t powersgd_start = 10;
  std::string param_dtype = "f32";  // dist::MixedPrecisionPolicy (Note [Master weights])
  std::string reduce_dtype;         // empty: param_dtype
};

// The policy --param-dtype and --reduce-dtype ask for.
dist::MixedPrecisionPolicy mixed_precision_policy(const ParallelFlags& flags);

// `full_units` says what --sharding full wraps as a unit in this app (e.g. "each transformer block").
void add_parallel_flags(CLI::App& app, ParallelFlags& flags, const std::string& full_units);

// `options` with the sharding mode, sharded checkpoints and DDP's bucket cap of `flags`.
dist::TrainerOptions with_parallel_flags(dist::TrainerOptions options, const ParallelFlags& flags);

// Registers --comm-hook on the trainer (Trainer::register_comm_hook: nothing alone or for "none"; refused
// with sharding zero2 and full).
// `seed` seeds PowerSGD's random start.
void register_comm_hook(dist::Trainer& trainer, const ParallelFlags& flags, uint64_t seed);

}  // namespace kiln::apps
