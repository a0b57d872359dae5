// Host helpers for the layout the fused attention kernels read and write, shared by Kiln's flash
// kernels (flash_attention.cu, flash_attention_backward.cu) and cuDNN's (attention_cudnn.cpp):
// (B, H, T, D) views with D contiguous and 16-byte aligned rows. No CUDA headers here.
#pragma once

#include <cstdint>

#include <kiln/core/cuda/plan/attention_layout.h>
#include <kiln/core/tensor.h>

namespace kiln::cuda::flash {

// t itself when `reader` can read it in place (Note [Attention layouts]: contiguous D, 16-byte
// aligned base and rows, and for cuDNN no stride-0 dimension), else a copy. Defined in
// flash_attention.cu.
Tensor kernel_readable(const Tensor& t, AttentionReader reader = AttentionReader::kiln);
// A fresh (B, H, T, D) tensor stored as (B, T, H, D), the layout the next projection reads.
Tensor empty_heads(int64_t b, int64_t h, int64_t t, int64_t d, DType dtype, Device device);

}  // namespace kiln::cuda::flash
