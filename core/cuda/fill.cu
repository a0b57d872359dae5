// fill for CUDA tensors: the value is converted to the dtype's bit pattern on the host, and the
// kernel writes that pattern, so one kernel per element width serves every dtype.
#include <cstdint>
#include <cstring>

#include <kiln/core/cuda/check.h>
#include <kiln/core/cuda/runtime.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/tensor.h>

namespace kiln::cuda {

template <class W>
__global__ void fill_pattern_kernel(W* out, W pattern, int64_t n) {  // out: (n,)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = pattern;
}

template <class W>
static void launch_fill(void* out, const void* pattern, int64_t n) {
  W w;
  std::memcpy(&w, pattern, sizeof(W));
  int threads = 256;
  int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
  fill_pattern_kernel<W><<<blocks, threads>>>(static_cast<W*>(out), w, n);
  KILN_CUDA_CHECK_LAUNCH();
}

void fill(const Tensor& dst, double value) {
  KILN_CHECK(dst.is_contiguous(), "fill_: non-contiguous tensor on ", dst.device(), " has no CUDA kernel yet");
  alignas(8) unsigned char pattern[8] = {};
  dispatch_all(dst.dtype(), "fill_", [&]<class T>() {
    T v = static_cast<T>(static_cast<acc_t<T>>(value));
    std::memcpy(pattern, &v, sizeof(T));
  });
  switch (dst.element_size()) {
    case 1: launch_fill<uint8_t>(dst.data_ptr(), pattern, dst.numel()); break;
    case 2: launch_fill<uint16_t>(dst.data_ptr(), pattern, dst.numel()); break;
    case 4: launch_fill<uint32_t>(dst.data_ptr(), pattern, dst.numel()); break;
    default: launch_fill<uint64_t>(dst.data_ptr(), pattern, dst.numel()); break;
  }
}

}  // namespace kiln::cuda
