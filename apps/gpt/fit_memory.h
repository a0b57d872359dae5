// train_gpt --fit-memory GiB: the micro-batch, the recompute mode and the gradient accumulation that
// reach the asked global batch within a per-rank memory budget, chosen from the memory planner's
// prediction (parallel/memory_plan.h, fed by gpt/memory_plan.h). fit_gpt_memory is pure: no device.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/arg.h>
#include <kiln/core/dtype.h>
#include <kiln/models/gpt.h>
#include <kiln/parallel/memory_plan.h>

#include "common/job.h"
#include "common/parallel_flags.h"

namespace kiln::apps {

/// What fit_gpt_memory plans for: the model, the global batch that stays fixed, the budget, and the
/// run's choices that change the bytes (device, autocast, head, sharding, world size, policy).
struct FitMemoryOptions {
  KILN_ARG(models::GPTConfig, config);
  KILN_ARG(int64_t, global_batch) = 1;   ///< sequences per optimizer step over all ranks: micro_batch * accum * world
  KILN_ARG(int64_t, seq_len) = 1;
  KILN_ARG(int64_t, budget_bytes) = 0;   ///< a rank's predicted peak must be at most this
  KILN_ARG(bool, cuda) = false;          ///< the device (the fused attention on CUDA in 16 bits)
  KILN_ARG(DType, amp) = DType::f32;     ///< autocast dtype (f32: none)
  KILN_ARG(bool, fused_head) = false;    ///< the chunked LM head, as resolved for the device
  /// Tried in this order at each micro-batch; empty: recompute_modes_by_cost (none first).
  KILN_ARG(std::vector<models::GPTRecompute>, recompute_modes);
  KILN_ARG(dist::MemoryPlanOptions, plan);  ///< sharding, world size (the ranks), policy, bucket caps
};

/// One candidate: a micro-batch and recompute mode, the accumulation that keeps the global batch,
/// and what a rank holds (Note [Accumulated gradients]).
struct FitMemoryPlan {
  int64_t micro_batch = 0;
  int64_t grad_accum = 0;
  models::GPTRecompute recompute = models::GPTRecompute::none;
  dist::MemoryPlan memory;             ///< one micro-step, by term
  int64_t accumulated_gradients = 0;   ///< unsharded .grad kept across micro-steps (0 without accumulation)
  int64_t peak = 0;                    ///< the step's peak per rank, accumulation included
};

/// The recompute modes by the FLOPs they re-run per token (none, then attention and mlp by
/// 8C^2 + 4TC against 16C^2, then block).
std::vector<models::GPTRecompute> recompute_modes_by_cost(const models::GPTConfig& config, int64_t seq_len);

/// The plan for one candidate (micro_batch must divide the per-rank batch).
FitMemoryPlan plan_gpt_step(const FitMemoryOptions& options, int64_t micro_batch, models::GPTRecompute recompute);

/// The largest micro-batch dividing the per-rank batch (global_batch / world) whose step fits the
/// budget, at the first recompute mode in order that fits it. Throws kiln::Error when none fits,
/// naming the smallest peak found and the plan that gives it.
FitMemoryPlan fit_gpt_memory(const FitMemoryOptions& options);

/// The chosen plan in three lines: micro-batch x accumulation x world, recompute; the predicted
/// peak against the budget; the planner's terms, largest first.
std::string describe_fit(const FitMemoryPlan& plan, const FitMemoryOptions& options);

// ---- train_gpt's flag ----

struct FitMemoryFlags {
  double gib = 0;                          ///< --fit-memory (0: off)
  const CLI::Option* recompute = nullptr;  ///< --recompute: given, it fixes the mode
};
/// Adds --fit-memory; call after add_memory_flags (it reads whether --recompute was given).
void add_fit_memory_flag(CLI::App& app, FitMemoryFlags& flags);

/// train_gpt with --fit-memory: the global batch its flags ask (total_batch_tokens, or B*T*world when
/// 0, which it then sets) planned for this job; sets batch_size and recompute (a --recompute value)
/// to the chosen plan and prints it on rank 0.
void apply_fit_memory(const FitMemoryFlags& flags, const models::GPTConfig& config, int64_t seq_len, const Job& job,
                      DType amp, const std::string& fused_head, const ParallelFlags& parallel, int64_t& batch_size,
                      int64_t& total_batch_tokens, std::string& recompute);

}  // namespace kiln::apps
