// The CUDA runtime as CPU code sees it: no CUDA headers here (STYLE.md), so every file can
// include it. Built without CUDA, the queries answer "no devices" and the transfers throw.
#pragma once

#include <string>

#include <kiln/core/cuda/runtime/allocator.h>

namespace kiln {
class Tensor;
}

namespace kiln::cuda {

// True when Kiln was compiled with CUDA. Op fronts branch with
//   if constexpr (cuda::kBuilt) if (x.device().is_cuda()) return cuda::softmax(x, dim);
// so a build without CUDA never references the launchers (no stubs needed).
#if KILN_WITH_CUDA
inline constexpr bool kBuilt = true;
#else
inline constexpr bool kBuilt = false;
#endif

// Number of usable devices; 0 when built without CUDA or when there is no driver/GPU
// (cudaGetDeviceCount then fails with error 35 or 100 rather than returning 0).
int device_count();
inline bool is_available() { return device_count() > 0; }

// "CUDA runtime 13.0, cuBLASLt 13.x, cuDNN 9.x" or "built without CUDA".
std::string build_info();

// Copies between devices (either side may be the CPU; Tensor::copy_ calls it with src already
// broadcast to dst's shape). Host <-> device transfers run on the CUDA device's current stream;
// they return only when the copy is done, unless `non_blocking` and the host tensor is pinned:
// then the copy is queued and the host memory is kept from reuse until it completes (the caller
// synchronizes the stream before reading a device-to-host result). Strided or dtype-changing
// copies are staged through contiguous buffers; the cast runs on the GPU.
void copy_across(const Tensor& dst, const Tensor& src, bool non_blocking = false);
// Fills a CUDA tensor with `value` converted to its dtype.
void fill(const Tensor& dst, double value);

}  // namespace kiln::cuda
