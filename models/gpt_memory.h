// What one GPT training step holds, from the shapes alone: the formula behind README's memory
// table ("Memory of a GPT step"), checked against the CPU allocator in
// tests/models/test_gpt_memory_estimate.cpp and printed by bench_gpt next to the measured peak.
#pragma once

#include <cstdint>
#include <vector>

#include <kiln/core/dtype.h>
#include <kiln/models/gpt.h>

namespace kiln::models {

/// The run that estimate_gpt_training_memory estimates: autocast, attention kernel, recomputation
/// and the other choices that change the bytes.
struct GPTMemoryOptions {
  bool autocast = false;         ///< bf16/f16 autocast over f32 parameters (else everything in f32)
  bool flash_attention = false;  ///< the fused attention (CUDA bf16/f16, D 64/128): no (T, T) probabilities
  GPTRecompute recompute = GPTRecompute::none;
  bool fused_head = false;       ///< linear_cross_entropy (Note [Chunked LM head])
  /// The parameters' dtype in forward and backward: f32 (autocast casts per op), or bf16/f16 under a
  /// 16-bit mixed-precision policy (parallel/mixed_precision_policy.h; a prediction until issue #49's
  /// policy trains): then the residual stream is 16-bit, no weight copies are kept, and the f32
  /// master weights join the optimizer's term.
  DType param_dtype = DType::f32;
};

/// Bytes, each term with its formula in the .cpp (N = B * T tokens, P parameters, L layers).
struct GPTMemoryEstimate {
  int64_t parameters = 0;     ///< P * 4 (P * 2 with 16-bit parameters)
  int64_t optimizer = 0;      ///< AdamW's two moments, P * 8 (+ the f32 master weights, P * 4, with 16-bit parameters)
  int64_t gradients = 0;      ///< P * 4 (P * 2), complete at the end of backward
  int64_t weight_copies = 0;  ///< autocast's 16-bit copies of the GEMM weights the graph keeps
  int64_t activations = 0;    ///< what the blocks save for backward
  int64_t head = 0;           ///< what the LM head keeps from forward to backward
  int64_t transient = 0;      ///< the largest extra during backward: the head's or one block's
  int64_t head_transient = 0;  ///< the head's backward alone
  int64_t block_transient = 0;  ///< one block's backward alone (with what recompute re-runs)
  int64_t end_transient = 0;   ///< what is in flight when the last gradients (the embeddings') arrive
  /// Alive when the loss is computed (no .grad yet: zero_grad sets them to none).
  int64_t after_forward() const { return parameters + optimizer + weight_copies + activations + head; }
  /// The step's peak: the start of backward (the forward's live set plus the largest transient) or
  /// its end (every gradient made), whichever is larger.
  int64_t peak() const;
};

/// The GPT's parameters as data parallelism lays them out: each tensor's elements in GPT::parameters()
/// order (the tied head is wte), and the indices of each block's (FSDP's units under wrap {"GPTBlock"};
/// wte, wpe and ln_f form the root). The memory planner (parallel/memory_plan.h) reads it.
struct GPTParameterLayout {
  std::vector<int64_t> numels;
  std::vector<std::vector<size_t>> blocks;
};
GPTParameterLayout gpt_parameter_layout(const GPTConfig& config);

GPTMemoryEstimate estimate_gpt_training_memory(const GPTConfig& config, int64_t batch, int64_t seq,
                                               const GPTMemoryOptions& options = {});

}  // namespace kiln::models
