// cuDNN's fused flash attention (SDPA) on CUDA, forward and backward, run from the op graphs of
// attention_cudnn_graph.cuh with plans cached per problem and scratch from the caching allocator.
// Same contract as Kiln's flash kernels (flash_attention.h): the same out layout and the same lse,
// so either backward can follow either forward. fused_attention.h chooses between the two.
// No CUDA headers here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <kiln/core/cuda/kernels/flash_attention.h>

namespace kiln::cuda {

// Why cuDNN's fused attention cannot take q, k, v, or "" when it can: one shape (B, H, T, D) with
// T >= 1 and D 64 or 128, all bf16 or all f16, one CUDA device of compute capability 8.0 or newer,
// cuDNN 9.8 or newer. Whether cuDNN has an engine is known only once the plan is built.
std::string attention_cudnn_unsupported(const Tensor& q, const Tensor& k, const Tensor& v);

// What a call does where cuDNN has no engine for the case (or cannot build one): give up quietly
// (the caller runs Kiln's kernels) or throw naming why.
enum class CudnnMiss { fall_back, fail };

// As flash_attention_forward: out (B, H, T, D) stored as (B, T, H, D), lse (B, H, T) f32. nullopt
// when cuDNN cannot run the case and `miss` is fall_back.
std::optional<FlashAttentionForward> attention_cudnn_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                             bool causal, double scale, CudnnMiss miss);

// As flash_attention_backward, from either forward's out and lse. cuDNN computes all three
// gradients; those not asked for come back undefined. cuDNN adds dQ into an f32 accumulator from
// several blocks (atomics), so dq may differ in the last bits from run to run.
std::optional<FlashAttentionGrads> attention_cudnn_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                                            const Tensor& v, const Tensor& out, const Tensor& lse,
                                                            bool causal, double scale, bool need_dq, bool need_dkdv,
                                                            CudnnMiss miss);

// Note [cuDNN SDPA engine choice] (attention_cudnn.cpp): which of the engine configs cuDNN's
// heuristics offer a plan runs, per pass: an index into attention_cudnn_engine_candidates, or -1
// for the default (the first of mode A's that builds). Starts from KILN_CUDNN_SDPA_ENGINE
// ("fwd=N,bwd=M"); plans are cached per choice. For sweeps and tests.
void set_attention_cudnn_engine_choice(bool backward, int64_t index);
int64_t attention_cudnn_engine_choice(bool backward);

// The candidates for this case and pass, labelled as sdpa_engine_label does ("engine 7 (mode A,
// 128 MiB workspace, knobs ...)"), with out and the gradients in the layouts the kernels allocate
// and dout as given (undefined: out's layout; the forward ignores it). Without `with_knobs`, only
// the heuristics' configs (the list's first entries; the knob variants follow them).
std::vector<std::string> attention_cudnn_engine_candidates(const Tensor& q, const Tensor& k, const Tensor& v,
                                                           const Tensor& dout, bool causal, bool backward,
                                                           bool with_knobs = true);

// The label of the config this thread's last forward / backward ran ("" before any).
std::string attention_cudnn_last_engine(bool backward);

// How many forward / backward calls cuDNN ran in this process (tests use them to tell the paths apart).
int64_t attention_cudnn_forward_count();
int64_t attention_cudnn_backward_count();

}  // namespace kiln::cuda
