// Whether cuDNN's attention backward needs its f32 dQ accumulator zeroed before each run, as a plain
// function CPU code can include (no CUDA or cuDNN headers); attention_cudnn.cpp asks it once.
#pragma once

#include <cstdint>
#include <string_view>

#include <kiln/core/error.h>

namespace kiln::cuda {

// Note [cuDNN dQ accumulator]
// The backward graph adds dQ = dS·K into a non-virtual f32 tensor (B, H, T, D) before casting it to
// dQ's dtype. cudnn-frontend memsets that buffer only for cuDNN < 9.6 (its workspace modification
// "type 1"); from 9.6 on cuDNN's engines initialize it themselves ("type 2": no initialization).
// Zeroing it anyway costs a 128 MiB memset per attention backward at B8 H16 T2048 D128.
// KILN_CUDNN_ZERO_DQ_ACCUM=auto (default: as the frontend), 1 (always) or 0 (never) exists so that a
// GPU run can compare gradients and times both ways (scripts/gpu-check.sh --pending).
inline bool sdpa_dq_accum_needs_zero(int64_t cudnn_version, std::string_view setting) {
  if (setting.empty() || setting == "auto") return cudnn_version < 90600;
  if (setting == "1") return true;
  if (setting == "0") return false;
  KILN_FAIL_VALUE("KILN_CUDNN_ZERO_DQ_ACCUM must be auto, 1 or 0, got '", setting, "'");
  return true;
}

}  // namespace kiln::cuda
