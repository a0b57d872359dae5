// cuDNN's fused flash attention (SDPA) on CUDA, forward and backward, run from the op graphs of
// attention_cudnn_graph.cuh with plans cached per problem and scratch from the caching allocator.
// Same contract as Kiln's flash kernels (flash_attention.h): the same out layout and the same lse,
// so either backward can follow either forward. fused_attention.h chooses between the two.
// No CUDA headers here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

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

// How many forward / backward calls cuDNN ran in this process (tests use them to tell the paths apart).
int64_t attention_cudnn_forward_count();
int64_t attention_cudnn_backward_count();

}  // namespace kiln::cuda
