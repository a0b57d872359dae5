// The choice between cuDNN's and Kiln's fused attention kernels (fused_attention.h).
#include <kiln/core/cuda/kernels/fused_attention.h>

#include <optional>
#include <string>

#include <kiln/core/cuda/kernels/attention_cudnn.h>
#include <kiln/cuda.h>

namespace kiln::cuda {

namespace {

// Note [Attention kernel choice]
// KILN_ATTENTION (or set_attention_backend) picks the fused kernels of CUDA attention:
// - kiln: Kiln's flash kernels wherever they take the case (bf16/f16, D 64 or 128, sm_80+), the
//   composed path elsewhere.
// - cudnn: cuDNN's fused flash attention (attention_cudnn.h) for every CUDA call; a case it cannot
//   take (f32, another head dim, no engine, libnvrtc missing) is an error naming why. For A/B runs.
// - auto (the default): cuDNN where it has an engine and Kiln's kernels elsewhere
//   (kCudnnAttentionByDefault). Flipped on by the first GPU run of this path (an H200, 2026-11-28):
//   tests/autograd/test_cuda_attention_cudnn.cpp passed against the CPU, gpt-tiny's bf16 loss
//   curve with cuDNN's attention matched Kiln's kernels', and cuDNN's forward + backward took
//   1.73 ms against Kiln's 6.84 at B8 H16 T2048 D128 and 0.60 against 1.71 at B16 H12 T1024 D64
//   (bench_cuda --sweep; gpt2-124m's step 54.1 ms against 67.3). Kiln's kernels stay for the
//   deterministic mode and the cases cuDNN has no engine for.
// Determinism: cuDNN's backward adds dQ into an f32 accumulator with atomics, so under
// set_cudnn_deterministic(true) auto takes Kiln's kernels (their backward is deterministic: Note
// [Flash attention tiling]) and cudnn is an error. Both forwards save the same lse, so a backward
// may use either kernels after either forward: a cuDNN backward that has no engine falls back to
// Kiln's under auto.
constexpr bool kCudnnAttentionByDefault = true;

const char* const kDeterministicConflict =
    "KILN_ATTENTION=cudnn with set_cudnn_deterministic(true): cuDNN's attention backward adds dQ with atomics, "
    "so it is not bitwise repeatable; use KILN_ATTENTION=auto or kiln (Kiln's kernels are deterministic)";

// Whether this call tries cuDNN first, and what it does when cuDNN cannot run it.
std::optional<CudnnMiss> cudnn_attempt(const Tensor& q, const Tensor& k, const Tensor& v) {
  switch (attention_backend()) {
    case AttentionBackend::kiln: return std::nullopt;
    case AttentionBackend::cudnn: {
      KILN_CHECK(!cudnn_deterministic(), kDeterministicConflict);
      const std::string why = attention_cudnn_unsupported(q, k, v);
      KILN_CHECK(why.empty(), "scaled_dot_product_attention with KILN_ATTENTION=cudnn: cuDNN's fused attention "
                 "cannot run this case: ", why, " (KILN_ATTENTION=auto runs Kiln's kernels or the composed path)");
      return CudnnMiss::fail;
    }
    case AttentionBackend::automatic:
      if (!kCudnnAttentionByDefault || cudnn_deterministic()) return std::nullopt;
      if (!attention_cudnn_unsupported(q, k, v).empty()) return std::nullopt;
      return CudnnMiss::fall_back;
  }
  return std::nullopt;
}

}  // namespace

bool fused_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (cudnn_attempt(q, k, v)) return true;  // throws under cudnn when cuDNN cannot take it
  return flash_attention_supported(q, k, v);
}

FusedAttentionForward fused_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                              double scale) {
  if (std::optional<CudnnMiss> miss = cudnn_attempt(q, k, v))
    if (std::optional<FlashAttentionForward> f = attention_cudnn_forward(q, k, v, causal, scale, *miss))
      return {f->out, f->lse, true};
  FlashAttentionForward f = flash_attention_forward(q, k, v, causal, scale);
  return {f.out, f.lse, false};
}

FlashAttentionGrads fused_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& out, const Tensor& lse, bool causal, double scale,
                                             bool need_dq, bool need_dkdv, bool cudnn_forward) {
  if (cudnn_forward && !cudnn_deterministic()) {
    const CudnnMiss miss = attention_backend() == AttentionBackend::cudnn ? CudnnMiss::fail : CudnnMiss::fall_back;
    if (std::optional<FlashAttentionGrads> g =
            attention_cudnn_backward(dout, q, k, v, out, lse, causal, scale, need_dq, need_dkdv, miss))
      return *g;
  }
  return flash_attention_backward(dout, q, k, v, out, lse, causal, scale, need_dq, need_dkdv);
}

}  // namespace kiln::cuda
