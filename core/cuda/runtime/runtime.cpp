// Device queries, build information and the transfers between the host and devices (and
// between devices). The allocators are in device_allocator.cpp, same-device copies in copy.cu.
#include <kiln/core/cuda/runtime/runtime.h>

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <mutex>

#include <kiln/core/cuda/runtime/check.cuh>
#include <kiln/core/cuda/kernels/copy.h>
#include <kiln/core/cuda/runtime/deferred_check.h>
#include <kiln/core/storage.h>
#include <kiln/core/tensor.h>

namespace kiln::cuda {

namespace {

void install_allocator() {
  static std::once_flag once;
  std::call_once(once, [] { set_allocator(DeviceType::CUDA, device_allocator()); });
}

// t with its broadcast dims (stride 0) shrunk to size 1: the data a transfer has to move. The
// receiving side expands it back.
Tensor compact_broadcast(const Tensor& t) {
  Shape s = t.shape();
  bool any = false;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.strides()[d] == 0 && s[d] > 1) {
      s[d] = 1;
      any = true;
    }
  return any ? make_tensor(t.storage(), t.dtype(), s, t.strides(), t.offset()) : t;
}

// A fresh contiguous copy of `t` in dtype `dt` on t's device (pinned host memory if asked).
Tensor contiguous_copy(const Tensor& t, DType dt, bool pinned = false) {
  Tensor out = pinned ? make_tensor(Storage::allocate_pinned(static_cast<size_t>(t.numel()) * dtype_size(dt)), dt,
                                    t.shape(), contiguous_strides(t.shape()))
                      : empty(t.shape(), dt, t.device());
  out.copy_(t);
  return out;
}

// Contiguous, same-dtype: dst[0, nbytes) = src[0, nbytes) on `device`'s current stream. Waits
// for the copy unless non_blocking and `host` is pinned; then `host`'s block is held until the
// copy is done (record_stream on the pinned allocator).
void memcpy_host_device(const Tensor& dst, const Tensor& src, const Tensor& host, int device, bool non_blocking) {
  KILN_ASSERT(dst.nbytes() == src.nbytes() && dst.is_contiguous() && src.is_contiguous() && dst.dtype() == src.dtype(),
              "memcpy of ", src.shape(), " ", src.dtype(), " into ", dst.shape(), " ", dst.dtype());
  const cudaMemcpyKind kind = src.device().is_cpu() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  DeviceGuard guard(device);
  const Stream stream = current_stream(device);
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), kind,
                                  static_cast<cudaStream_t>(stream.handle())));
  if (non_blocking && host.is_pinned())
    record_stream(*host.storage(), stream);
  else
    stream.synchronize();
}

void host_to_device(const Tensor& dst, const Tensor& src, bool non_blocking) {
  const int device = dst.device().index;
  const Tensor s = compact_broadcast(src);
  if (s.shape() == dst.shape() && s.dtype() == dst.dtype() && s.is_contiguous() && dst.is_contiguous()) {
    memcpy_host_device(dst, s, s, device, non_blocking);
    return;
  }
  // Strided source: gathered on the host first (into pinned memory when the copy may stay
  // asynchronous). Then uploaded as is, and cast/scattered/broadcast into dst by one kernel.
  const bool async = non_blocking && src.is_pinned();
  const Tensor h = s.is_contiguous() ? s : contiguous_copy(s, s.dtype(), /*pinned=*/async);
  Tensor d = empty(h.shape(), h.dtype(), dst.device());
  memcpy_host_device(d, h, h, device, async);
  copy_device(dst, d.expand(dst.shape()));  // same stream as the upload: ordered after it
}

void device_to_host(const Tensor& dst, const Tensor& src, bool non_blocking) {
  const int device = src.device().index;
  const Tensor s = compact_broadcast(src);
  // Gather and cast on the device into dst's dtype, so only dst's bytes cross the bus.
  const Tensor d = s.is_contiguous() && s.dtype() == dst.dtype() ? s : contiguous_copy(s, dst.dtype());
  if (d.shape() == dst.shape() && dst.is_contiguous()) {
    memcpy_host_device(dst, d, dst, device, non_blocking);
  } else {
    // dst is strided (or src broadcast): download, wait, and scatter on the host.
    Tensor h = empty(d.shape(), d.dtype(), Device::cpu());
    memcpy_host_device(h, d, h, device, /*non_blocking=*/false);
    Tensor out = dst;
    out.copy_(h.expand(dst.shape()));
  }
  // A blocking read waited for the device: the deferred check records queued before are on the
  // host now (Note [Deferred device checks]).
  check_deferred_faults(/*wait=*/false);
}

// Between two devices: the copy runs on the source device's current stream, fenced both ways
// against the destination device's current stream (as torch does): it starts after the work
// already queued on the destination, and later destination work starts after it.
void device_to_device(const Tensor& dst, const Tensor& src) {
  const int from = src.device().index, to = dst.device().index;
  const Tensor s = compact_broadcast(src);
  const Tensor a = s.is_contiguous() && s.dtype() == dst.dtype() ? s : contiguous_copy(s, dst.dtype());
  const Tensor b = a.shape() == dst.shape() && dst.is_contiguous() ? dst : empty(a.shape(), a.dtype(), dst.device());
  const Stream from_stream = current_stream(from), to_stream = current_stream(to);
  Event to_ready;
  to_ready.record(to_stream);
  to_ready.wait(from_stream);
  {
    DeviceGuard guard(from);
    KILN_CUDA_CHECK(cudaMemcpyPeerAsync(b.data_ptr(), to, a.data_ptr(), from, a.nbytes(),
                                        static_cast<cudaStream_t>(from_stream.handle())));
  }
  Event from_ready;
  from_ready.record(from_stream);
  from_ready.wait(to_stream);
  if (!b.is_same(dst)) copy_device(dst, b.expand(dst.shape()));
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

void copy_across(const Tensor& dst, const Tensor& src, bool non_blocking) {
  KILN_CHECK(device_count() > 0, "copy_: cannot copy between ", src.device(), " and ", dst.device(),
             ": no CUDA device is available");
  KILN_CHECK(dst.shape() == src.shape(), "copy_: destination shape ", dst.shape(), " and source shape ", src.shape(),
             " differ");
  KILN_CHECK(dst.device() != src.device(), "copy_across: both tensors are on ", dst.device());
  if (dst.numel() == 0) return;
  if (src.device().is_cpu())
    host_to_device(dst, src, non_blocking);
  else if (dst.device().is_cpu())
    device_to_host(dst, src, non_blocking);
  else
    device_to_device(dst, src);
}

}  // namespace kiln::cuda
