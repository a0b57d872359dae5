// bench_gpt --estimate-memory: the GPT step's memory formula (models/gpt_memory.h) for one process,
// and with --sharding the memory planner (parallel/memory_plan.h) per rank, by term, for every
// config, sharding mode, world size and mixed-precision policy. Nothing runs: no device needed.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/dtype.h>
#include <kiln/models/gpt_memory.h>
#include <kiln/parallel/memory_plan.h>

#include "gpt/bench_tables.h"

namespace kiln::apps {

// What a GPT step on `device_is_cuda` computes with: autocast unless amp is f32, the fused attention on
// CUDA in 16 bits where head dim is 64 or 128, the head and recompute as given, 16-bit parameters
// when the policy asks for them.
models::GPTMemoryOptions gpt_memory_options(const models::GPTConfig& config, bool device_is_cuda, DType amp,
                                           models::GPTRecompute recompute, bool fused_head,
                                           DType param_dtype = DType::f32);

// The planner's input for a GPT: its parameter layout, FSDP units per block, and the step's terms.
dist::MemoryPlanModel gpt_memory_plan_model(const models::GPTConfig& config, int64_t batch, int64_t seq,
                                            const models::GPTMemoryOptions& options);

// The formula's one-process line per config (what --estimate-memory prints without --sharding).
void print_memory_formula(const std::vector<BenchRow>& rows, bool cuda, DType amp, models::GPTRecompute recompute,
                          models::GPTFusedHead fused_head);

// --param-dtype and --reduce-dtype (the policy) and the planner's table.
struct MemoryPlanFlags {
  std::string param_dtype = "f32", reduce_dtype;  // reduce_dtype empty: param_dtype (torch's default)
};
void add_memory_plan_flags(CLI::App& app, MemoryPlanFlags& flags);
dist::MixedPrecisionPolicy parse_policy(const MemoryPlanFlags& flags);

// Per config: one column per mode, a row per term (GiB per rank), the bytes per parameter after a
// step and the peak with where it falls.
void print_memory_plan(const std::vector<BenchRow>& rows, bool cuda, DType amp, models::GPTRecompute recompute,
                       models::GPTFusedHead fused_head, const std::vector<dist::Sharding>& modes,
                       const dist::MemoryPlanOptions& options);

}  // namespace kiln::apps
