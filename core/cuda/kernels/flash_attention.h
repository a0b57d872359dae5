// Fused (flash) attention on CUDA: softmax(q k^T * scale [+ causal mask]) v without a T x T matrix
// in memory. Forward in flash_attention.cu, backward in flash_attention_backward.cu; the math and
// tiling are in Note [Flash attention tiling] (flash_attention_device.cuh). No CUDA headers here.
#pragma once

#include <kiln/core/tensor.h>

namespace kiln::cuda {

// True when the fused kernels take these inputs: q, k, v (B, H, T, D) on one CUDA device of
// compute capability 8.0 or newer, all bf16 or all f16, D = 64 or 128 for q, k and v alike.
// Anything else takes the composed path (scaled_dot_product_attention keeps it).
bool flash_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v);

struct FlashAttentionForward {
  Tensor out;  // (B, H, T, D) in q's dtype, stored as (B, T, H, D): out.transpose(1, 2) is contiguous
  Tensor lse;  // (B, H, T) f32: log(sum_j exp(scale * q_i . k_j)) over the keys row i sees
};

// q, k, v (B, H, T, D) with any batch/head/row strides; D must be contiguous and rows 16-byte
// aligned, otherwise the launcher copies the tensor first (the GPT's qkv split needs no copy).
FlashAttentionForward flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                              double scale);

struct FlashAttentionGrads {
  Tensor dq, dk, dv;  // (B, H, T, D) in q's dtype (stored like out); undefined when not asked for
};

// The gradients of flash_attention_forward from dout (B, H, T, D) and the forward's out and lse.
// Deterministic (no atomics). need_dq / need_dkdv skip the passes nobody asked for.
FlashAttentionGrads flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                             const Tensor& v, const Tensor& out, const Tensor& lse, bool causal,
                                             double scale, bool need_dq, bool need_dkdv);

}  // namespace kiln::cuda
