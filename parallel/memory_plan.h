// The memory planner: what one rank of a data-parallel run holds, by term, in each sharding mode
// (sharding.h) and mixed-precision policy (mixed_precision_policy.h), from the parameter sizes and a
// model's per-step compute terms alone (no device, no process group). The terms follow what the
// Trainer builds (DDP's buckets, ShardedOptimizer, ShardedReducer, FSDP units; Note [Memory plan]);
// tests/parallel/test_memory_plan*.cpp check them against the CPU allocator on forked ranks.
// apps/gpt/memory_plan.h feeds it a GPT (bench_gpt --estimate-memory --sharding).
#pragma once

#include <cstdint>
#include <vector>

#include <kiln/core/arg.h>
#include <kiln/parallel/mixed_precision_policy.h>
#include <kiln/parallel/sharding.h>

namespace kiln::dist {

// ---- ZeRO's model states (Rajbhandari et al., arXiv 1910.02054, section 5 and Table 1) ----

enum class ZeroStage { baseline, os, os_g, os_g_p };  ///< DDP, P_os, P_os+g, P_os+g+p
const char* zero_stage_name(ZeroStage s);             ///< "baseline", "P_os", "P_os+g", "P_os+g+p"

/// Bytes of model states per device for psi parameters at data-parallel degree n, by the paper's
/// mixed-precision rule: 2 psi of 16-bit parameters, 2 psi of 16-bit gradients and k psi of optimizer
/// states (k = 12 for mixed-precision Adam: f32 master weights, momentum, variance):
///   baseline (2 + 2 + k) psi   P_os 2 psi + 2 psi + k psi / n   P_os+g 2 psi + (2 + k) psi / n
///   P_os+g+p (2 + 2 + k) psi / n
double zero_model_states_bytes(double psi, ZeroStage stage, int64_t n, double k = 12);

// ---- A model, as the planner needs it ----

/// What one micro-step's compute holds on a rank, in bytes, for its per-rank batch (the same in every
/// sharding mode). models::estimate_gpt_training_memory gives these for a GPT.
struct StepMemory {
  int64_t activations = 0;    ///< saved for backward, all layers
  int64_t weight_copies = 0;  ///< autocast's 16-bit copies of f32 weights the graph keeps to backward
  int64_t head = 0;           ///< what the output layer keeps from forward to backward
  int64_t head_transient = 0;   ///< the largest extra during the output layer's backward
  int64_t block_transient = 0;  ///< the largest extra during one block's backward
  int64_t end_transient = 0;    ///< alive when the first layers' gradients arrive (end of backward)
};

/// A model as plan_memory needs it: its parameters' sizes, its FSDP units and one micro-step's
/// compute memory (models::gpt_parameter_layout and estimate_gpt_training_memory give a GPT's).
struct MemoryPlanModel {
  std::vector<int64_t> param_numels;        ///< every trained parameter, in Module::parameters() order
  std::vector<std::vector<size_t>> units;   ///< FSDP's wrapped units (indices), forward order; the rest is the root
  StepMemory step;
};

/// What plan_memory predicts for: the sharding mode, the world size, the mixed-precision policy and
/// the options of the mode that change the bytes.
struct MemoryPlanOptions {
  KILN_ARG(Sharding, sharding) = Sharding::none;
  KILN_ARG(int, world_size) = 1;               ///< ranks; a group of one still shards as asked (the Trainer's rule)
  KILN_ARG(MixedPrecisionPolicy, mixed_precision);  ///< default: f32 parameters and reductions (today's)
  KILN_ARG(int, optimizer_buffers) = 2;        ///< f32 state tensors per parameter element: AdamW 2, SGD momentum 1
  KILN_ARG(double, bucket_cap_mb) = 25;        ///< DDPOptions' and the ShardedOptimizer's bucket caps
  KILN_ARG(double, first_bucket_cap_mb) = 1;
  KILN_ARG(bool, gradient_as_bucket_view) = false;  ///< DDPOptions'
  KILN_ARG(bool, prefetch) = true;             ///< FSDPOptions': two units gathered at once, else one
};

/// One rank's bytes by term (Note [Memory plan]). The first five stay between steps.
struct MemoryPlan {
  int64_t parameters = 0;        ///< the parameters forward reads, in param_dtype: whole (none, ZeRO-1/2) or, under
                                 ///< FSDP with a 16-bit policy, the rank's shard (FSDP today: 0, see master_weights)
  int64_t gradients = 0;         ///< the rank's gradient shard (ZeRO-2, FSDP: reduce-scattered into it)
  int64_t master_weights = 0;    ///< f32 copy the optimizer steps: the rank's shard (ZeRO/FSDP: the packed chunk the
                                 ///< all-gather sends; FSDP's only persistent copy), all of it for DDP with 16-bit params
  int64_t optimizer_states = 0;  ///< the optimizer's moments for the rank's shard (or all parameters)
  int64_t buckets = 0;           ///< DDP's gradient buckets (none, ZeRO-1 at world > 1), in reduce_dtype
  /// Alive during a step only:
  int64_t full_gradients = 0;    ///< .grad outside the buckets at their most (none, ZeRO-1: all, freed by zero_grad;
                                 ///< ZeRO-2: the last bucket's; FSDP: a unit's or the root's)
  int64_t reduce_buffers = 0;    ///< reduce-scatter buffers at their most: ZeRO-2 two adjacent buckets in flight,
                                 ///< FSDP two units in flight, or the root's and one unit's at the end
  int64_t gathered = 0;          ///< FSDP: the root and the units gathered during backward (prefetch: two)
  int64_t parameter_gather = 0;  ///< ZeRO-1/2's step: two buckets all-gathered at once
  int64_t weight_copies = 0, activations = 0, head = 0;  ///< StepMemory's
  int64_t transient = 0;         ///< the largest backward transient (StepMemory's head or block)
  int64_t end_transient = 0;
  /// Where the step peaks (Note [Memory plan]).
  int64_t start_of_backward = 0, end_of_backward = 0, optimizer_step = 0;

  int64_t after_step() const { return parameters + gradients + master_weights + optimizer_states + buckets; }
  int64_t peak() const;
};

/// Note [Memory plan]
/// Three moments bound a step on one rank (S = after_step(), what stays between steps):
///   start of backward  S + activations + weight copies + head + the largest backward transient (the
///                      head's or the first block's), plus FSDP's root and, in a block, the two units
///                      gathered (the one computing, the one prefetched); or, for FSDP, the first unit's
///                      full gradients and its reduce-scatter buffer in place of the block transient;
///   end of backward    S + every full gradient outside the buckets (none and ZeRO-1 without bucket
///                      views), ZeRO-2's reduce-scatter buffers of the last two buckets (ShardedReducer keeps
///                      two in flight) with the last bucket's gradients, FSDP's root gathered with its
///                      gradients, its buffer and one unit's; plus the end transient;
///   optimizer step     S + .grad (DDP without views) + ZeRO-1/2's all-gather of two buckets; with a
///                      16-bit policy also the f32 copy of the gradients the rank steps and ZeRO-1/2's
///                      16-bit shard the all-gathers send (Note [Master weights]).
/// A 16-bit policy has no weight copies: autocast finds the GEMM weights in 16 bits already.
/// The peak is the largest. Sizes are exact where the layout decides them: DDP's buckets and
/// ZeRO's padded chunks come from compute_bucket_assignment and ShardLayout on shape-only tensors,
/// FSDP's units from the caller's unit list. Not counted: the allocator's rounding (64 bytes on the
/// CPU; blocks of 1 MiB and more round to 1/8 of their power of two), DDP's bucket tails (a few
/// values per bucket), the first step's extras (AdamW's lazy state, DDP's bucket rebuild), NCCL's
/// and Gloo's own buffers, and the CUDA caching allocator's fragmentation.
MemoryPlan plan_memory(const MemoryPlanModel& model, const MemoryPlanOptions& options = {});

}  // namespace kiln::dist
