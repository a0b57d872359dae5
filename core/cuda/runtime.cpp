// Device queries, build information, the CUDA allocator and cross-device copies.
// The allocator here is plain cudaMalloc/cudaFree; the caching allocator replaces it with the
// CUDA backend issue.
#include <kiln/core/cuda/runtime.h>

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdio>
#include <mutex>

#include <kiln/core/cuda/check.h>
#include <kiln/core/tensor.h>

namespace kiln::cuda {

namespace {

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, nbytes);
    KILN_CHECK(err == cudaSuccess, "CUDA out of memory (or error): failed to allocate ", nbytes, " bytes: ",
               cudaGetErrorString(err));
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) noexcept override {
    if (!ptr) return;
    cudaError_t err = cudaFree(ptr);
    if (err != cudaSuccess) std::fprintf(stderr, "kiln: cudaFree of %zu bytes failed: %s\n", nbytes, cudaGetErrorString(err));
  }
};

void install_allocator() {
  static CudaAllocator allocator;
  static std::once_flag once;
  std::call_once(once, [] { set_allocator(DeviceType::CUDA, &allocator); });
}

}  // namespace

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky "no driver" error
      return 0;
    }
    return n;
  }();
  if (count > 0) install_allocator();
  return count;
}

std::string build_info() {
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  size_t lt = cublasLtGetVersion();
  size_t dnn = cudnnGetVersion();
  return detail::str_cat("CUDA runtime ", rt / 1000, ".", (rt % 1000) / 10, ", cuBLASLt ", lt / 10000, ".",
                         (lt / 100) % 100, ", cuDNN ", dnn / 10000, ".", (dnn / 100) % 100, ", ", device_count(),
                         " device(s)");
}

void copy_across(const Tensor& dst, const Tensor& src) {
  KILN_CHECK(device_count() > 0, "copy_: cannot copy between ", src.device(), " and ", dst.device(),
             ": no CUDA device is available");
  // Convert dtype on the CPU side; the device side must be contiguous (strided CUDA copies arrive
  // with the CUDA kernels).
  Tensor s = src;
  if (s.device().is_cpu()) s = s.to(dst.dtype()).contiguous();
  KILN_CHECK(s.is_contiguous(), "copy_: non-contiguous source on ", s.device(), " (shape ", s.shape(),
             ", strides ", s.strides(), ") has no CUDA kernel yet");
  if (dst.device().is_cpu() && s.dtype() != dst.dtype()) {
    Tensor staged = empty(s.shape(), s.dtype(), Device::cpu());
    copy_across(staged, s);
    const_cast<Tensor&>(dst).copy_(staged);
    return;
  }
  KILN_CHECK(dst.is_contiguous() && s.dtype() == dst.dtype(), "copy_: to a non-contiguous or ", dst.dtype(),
             " tensor on ", dst.device(), " from ", s.dtype(), " has no CUDA kernel yet");
  cudaMemcpyKind kind = s.device().is_cpu()   ? cudaMemcpyHostToDevice
                        : dst.device().is_cpu() ? cudaMemcpyDeviceToHost
                                                : cudaMemcpyDeviceToDevice;
  KILN_CUDA_CHECK(cudaMemcpy(dst.data_ptr(), s.data_ptr(), dst.nbytes(), kind));
}

}  // namespace kiln::cuda
