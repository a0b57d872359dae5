// Model FLOPs utilization of a GPT training step, as train_gpt and bench_gpt report it: the
// FLOPs per token of the model (llm.c's estimate) over the device's peak. One definition, so the
// two apps' MFU figures compare.
#pragma once

#include <cstdint>

#include <kiln/core/device.h>
#include <kiln/core/dtype.h>
#include <kiln/models/gpt.h>

#include "common/cpu_peak.h"

namespace kiln::apps {

constexpr double kHopperPeakBf16 = 989.4e12;  // H100/H200 SXM dense bf16 (TF32: half of it)

// Training FLOPs per token: 6N + 6·L·C·T with N the non-embedding parameters (the estimate of
// llm.c; nanoGPT's has the same 6N term): 6N for the matmuls' forward and backward, 6·L·C·T for
// attention's QK^T and AV over a causal context of T.
inline double flops_per_token(const models::GPTConfig& config, int64_t non_embedding_params, int64_t seq_len) {
  return 6.0 * double(non_embedding_params) + 6.0 * double(config.n_layer) * double(config.n_embd) * double(seq_len);
}

// The same for a model built from `config`: N is GPT::num_parameters(/*non_embedding=*/true),
// every parameter but wpe (wte stays: it is also the head's weight).
inline double flops_per_token(const models::GPTConfig& config, int64_t seq_len) {
  return flops_per_token(config, models::GPT::count_parameters(config) - config.block_size * config.n_embd, seq_len);
}

// One device's peak FLOP/s for a step whose matmuls run in `amp` (f32: autocast off): on CUDA
// Hopper's dense bf16/f16 peak, half of it for f32 (TF32); on the CPU the f32 peak of `threads`
// threads derived from the CPU (cpu_peak.h; the apps print cpu_peak(threads).describe() beside it).
inline double device_peak_flops(Device device, DType amp, int threads) {
  if (device.is_cuda()) return amp == DType::f32 ? kHopperPeakBf16 / 2 : kHopperPeakBf16;
  return cpu_peak(threads).flops;
}

}  // namespace kiln::apps
