// Which (B, H, T, D) views the fused attention kernels read in place, as a plain function CPU code
// can include (no CUDA headers): flash::kernel_readable (flash_attention.cu) copies whatever this
// refuses. tests/core/test_attention_layout.cpp checks it on the CPU.
#pragma once

#include <cstdint>

namespace kiln::cuda::flash {

// Which kernel will read the view.
enum class AttentionReader {
  kiln,   // Kiln's flash kernels: any stride, broadcast (stride-0) dimensions included
  cudnn,  // cuDNN's fused attention graphs: no stride-0 dimension of size > 1
};

// Note [Attention layouts]
// Both readers need D contiguous (stride 1), a 16-byte aligned base and 16-byte aligned rows: every
// other dimension of size > 1 has a stride that is a multiple of 8 elements (bf16/f16). A size-1
// dimension's stride never matters. Kiln's kernels index each head with its own strides, so an
// expanded dimension (stride 0, e.g. the dout of `out.sum()`) reads the same row again, correctly.
// cuDNN's tensor descriptors take strides as a layout, and 0 passes "0 % 8 == 0" but is no layout
// cuDNN documents for its SDPA inputs (the frontend validates positive strides from real tensors):
// such a view is copied for cuDNN, never handed over as a 0 stride.
inline bool attention_readable_in_place(const int64_t* sizes, const int64_t* strides, uintptr_t address,
                                        AttentionReader reader) {
  if (strides[3] != 1) return false;
  if (address % 16 != 0) return false;
  for (int d = 0; d < 3; ++d) {
    if (sizes[d] <= 1) continue;
    if (strides[d] % 8 != 0) return false;  // 8 elements = 16 bytes
    if (strides[d] == 0 && reader == AttentionReader::cudnn) return false;
  }
  return true;
}

}  // namespace kiln::cuda::flash
