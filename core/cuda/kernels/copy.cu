// The strided copy-and-cast kernel. Element i (row-major over dst's shape) goes from src's
// offset to dst's offset, both from one OffsetCalc, converted the way the CPU copy converts
// (through the compute type: 16-bit floats via float, rounding to nearest even).
#include <kiln/core/cuda/kernels/common.cuh>
#include <kiln/core/cuda/kernels/copy.h>
#include <kiln/core/cuda/plan/offset_calc.h>

namespace kiln::cuda {

namespace {

// dst: (n,) elements at calc offsets[0]; src: at calc offsets[1].
template <class D, class S, class I>
__global__ void copy_kernel(D* dst, const S* __restrict__ src, OffsetCalc<2> calc, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    I off[2];
    calc.get<I>(static_cast<I>(i), off);
    if constexpr (std::is_same_v<D, S>)
      dst[off[0]] = src[off[1]];
    else
      dst[off[0]] = store_as<D>(load_acc(src[off[1]]));
  }
}

template <class D, class S>
void launch_copy(void* dst, const void* src, const OffsetCalc<2>& calc, int64_t n, cudaStream_t stream) {
  const int blocks = blocks_for(n);
  if (calc.fits_32bit())
    copy_kernel<D, S, uint32_t><<<blocks, kThreads, 0, stream>>>(static_cast<D*>(dst), static_cast<const S*>(src), calc, n);
  else
    copy_kernel<D, S, int64_t><<<blocks, kThreads, 0, stream>>>(static_cast<D*>(dst), static_cast<const S*>(src), calc, n);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void copy_device(const Tensor& dst, const Tensor& src) {
  KILN_CHECK(dst.device().is_cuda() && dst.device() == src.device(), "copy_: expected two tensors on one CUDA device, got ",
             dst.device(), " and ", src.device());
  KILN_CHECK(dst.shape() == src.shape(), "copy_: destination shape ", dst.shape(), " and source shape ", src.shape(),
             " differ (broadcast the source first)");
  const int64_t n = dst.numel();
  if (n == 0) return;
  cudaStream_t stream = stream_for(dst);
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const OffsetCalc<2> calc = make_offset_calc<2>(dst.shape(), {&dst.strides(), &src.strides()});
  if (dst.dtype() == src.dtype()) {  // a move of bits: one kernel per element width
    switch (dst.element_size()) {
      case 1: launch_copy<uint8_t, uint8_t>(dst.data_ptr(), src.data_ptr(), calc, n, stream); break;
      case 2: launch_copy<uint16_t, uint16_t>(dst.data_ptr(), src.data_ptr(), calc, n, stream); break;
      case 4: launch_copy<uint32_t, uint32_t>(dst.data_ptr(), src.data_ptr(), calc, n, stream); break;
      default: launch_copy<uint64_t, uint64_t>(dst.data_ptr(), src.data_ptr(), calc, n, stream); break;
    }
    return;
  }
  dispatch_all_device(dst.dtype(), "copy_", [&]<class D>() {
    dispatch_all_device(src.dtype(), "copy_", [&]<class S>() {
      if constexpr (!std::is_same_v<D, S>) launch_copy<D, S>(dst.data_ptr(), src.data_ptr(), calc, n, stream);
    });
  });
}

}  // namespace kiln::cuda
