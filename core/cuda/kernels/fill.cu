// fill and arange for CUDA tensors. fill converts the value to the dtype's bit pattern on the
// host, and the kernels write that pattern, so one kernel per element width serves every dtype;
// non-contiguous tensors go through an OffsetCalc.
#include <cstdint>
#include <cstring>

#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/cuda/kernels/fill.h>
#include <kiln/core/cuda/plan/offset_calc.h>
#include <kiln/core/cuda/runtime/runtime.h>

namespace kiln::cuda {

namespace {

template <class W>
__global__ void fill_pattern_kernel(W* out, W pattern, int64_t n) {  // out: (n,)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = pattern;
}

// out: n elements at calc's offsets.
template <class W, class I>
__global__ void fill_strided_kernel(W* out, W pattern, OffsetCalc<1> calc, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    I off[1];
    calc.get<I>(static_cast<I>(i), off);
    out[off[0]] = pattern;
  }
}

template <class W>
void launch_fill(const Tensor& dst, const void* pattern_bytes) {
  W pattern;
  std::memcpy(&pattern, pattern_bytes, sizeof(W));
  const int64_t n = dst.numel();
  cudaStream_t stream = stream_for(dst);
  W* out = static_cast<W*>(dst.data_ptr());
  if (dst.is_contiguous()) {
    fill_pattern_kernel<W><<<blocks_for(n), kThreads, 0, stream>>>(out, pattern, n);
  } else {
    const OffsetCalc<1> calc = make_offset_calc<1>(dst.shape(), {&dst.strides()});
    if (calc.fits_32bit())
      fill_strided_kernel<W, uint32_t><<<blocks_for(n), kThreads, 0, stream>>>(out, pattern, calc, n);
    else
      fill_strided_kernel<W, int64_t><<<blocks_for(n), kThreads, 0, stream>>>(out, pattern, calc, n);
  }
  KILN_CUDA_CHECK_LAUNCH();
}

template <class T>
__global__ void arange_kernel(T* out, double start, double step, int64_t n) {  // out: (n,)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = store_as<T>(fma(static_cast<double>(i), step, start));
}

}  // namespace

void fill(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  alignas(8) unsigned char pattern[8] = {};
  dispatch_all(dst.dtype(), "fill_", [&]<class T>() {
    T v = static_cast<T>(static_cast<acc_t<T>>(value));
    std::memcpy(pattern, &v, sizeof(T));
  });
  switch (dst.element_size()) {
    case 1: launch_fill<uint8_t>(dst, pattern); break;
    case 2: launch_fill<uint16_t>(dst, pattern); break;
    case 4: launch_fill<uint32_t>(dst, pattern); break;
    default: launch_fill<uint64_t>(dst, pattern); break;
  }
}

void arange(const Tensor& out, double start, double step) {
  KILN_CHECK(out.dim() == 1 && out.is_contiguous(), "arange: expected a contiguous 1-d output, got shape ",
             out.shape(), " strides ", out.strides());
  const int64_t n = out.numel();
  if (n == 0) return;
  cudaStream_t stream = stream_for(out);
  dispatch_numeric_device(out.dtype(), "arange", [&]<class T>() {
    arange_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(ptr<T>(out), start, step, n);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda
