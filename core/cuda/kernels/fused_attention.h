// The fused attention CUDA's scaled_dot_product_attention runs: Kiln's flash kernels
// (flash_attention.h) or cuDNN's (attention_cudnn.h), chosen per call by the attention switch of
// kiln/cuda.h (KILN_ATTENTION; Note [Attention kernel choice]). No CUDA headers here.
#pragma once

#include <kiln/core/cuda/kernels/flash_attention.h>

namespace kiln::cuda {

// True when fused kernels take q, k, v (CUDA tensors); false sends the caller to the composed path.
// Under KILN_ATTENTION=cudnn a case cuDNN cannot take is an error naming why.
bool fused_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v);

struct FusedAttentionForward {
  Tensor out;          // as FlashAttentionForward::out
  Tensor lse;          // as FlashAttentionForward::lse
  bool cudnn = false;  // cuDNN's kernels ran (the backward then tries them first)
};

FusedAttentionForward fused_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                              double scale);

// The gradients from the forward's out and lse; `cudnn_forward` is FusedAttentionForward::cudnn.
FlashAttentionGrads fused_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& out, const Tensor& lse, bool causal, double scale,
                                             bool need_dq, bool need_dkdv, bool cudnn_forward);

}  // namespace kiln::cuda
