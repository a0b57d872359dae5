// cuDNN handles (a pool per device, one leased per thread) and the RAII descriptors of cudnn.cuh.
#include <kiln/core/cuda/runtime/cudnn.cuh>

#include <climits>
#include <cstdio>
#include <mutex>
#include <vector>

#include <kiln/core/cuda/runtime/check.cuh>
#include <kiln/core/cuda/runtime/stream.h>

namespace kiln::cuda {

namespace {

// Free handles per device. Leaked on purpose: handles outlive every thread and are never destroyed.
struct HandlePool {
  std::mutex mutex;
  std::vector<std::vector<cudnnHandle_t>> free;  // [device] -> handles no thread holds

  cudnnHandle_t acquire(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (device < static_cast<int>(free.size()) && !free[device].empty()) {
        cudnnHandle_t h = free[device].back();
        free[device].pop_back();
        return h;
      }
    }
    cudnnHandle_t h = nullptr;
    KILN_CUDNN_CHECK(cudnnCreate(&h));  // on the current device, which the caller has set
    return h;
  }
  void release(int device, cudnnHandle_t h) {
    std::lock_guard<std::mutex> lock(mutex);
    if (device >= static_cast<int>(free.size())) free.resize(device + 1);
    free[device].push_back(h);
  }
};

HandlePool& pool() {
  static HandlePool* p = new HandlePool;
  return *p;
}

// The handles this thread holds, one per device; given back to the pool when the thread ends.
struct ThreadHandles {
  std::vector<cudnnHandle_t> by_device;
  ~ThreadHandles() {
    for (size_t d = 0; d < by_device.size(); ++d)
      if (by_device[d]) pool().release(static_cast<int>(d), by_device[d]);
  }
};

}  // namespace

cudnnHandle_t cudnn_handle_for(const Tensor& t) {
  KILN_CHECK(t.device().is_cuda(), "cuDNN: expected a CUDA tensor, got one on ", t.device());
  const int device = t.device().index;
  set_device(device);
  thread_local ThreadHandles handles;
  if (device >= static_cast<int>(handles.by_device.size())) handles.by_device.resize(device + 1, nullptr);
  cudnnHandle_t& h = handles.by_device[device];
  if (!h) h = pool().acquire(device);
  KILN_CUDNN_CHECK(cudnnSetStream(h, static_cast<cudaStream_t>(current_stream(device).handle())));
  return h;
}

cudnnDataType_t cudnn_dtype(DType t, const char* op) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: break;
  }
  KILN_FAIL(op, ": cuDNN has no kernel for dtype ", t, " (expected f32, f64, bf16 or f16)");
  return CUDNN_DATA_FLOAT;
}

int cudnn_int(int64_t v, const char* op, const char* what) {
  KILN_CHECK(v >= 0 && v <= INT_MAX, op, ": ", what, " = ", v, " does not fit the 32-bit sizes cuDNN takes");
  return static_cast<int>(v);
}

// --- descriptors ---------------------------------------------------------------------------------

void cudnn_log_destroy(cudnnStatus_t status) {
  if (status != CUDNN_STATUS_SUCCESS)
    std::fprintf(stderr, "kiln: destroying a cuDNN descriptor failed: %s\n", cudnnGetErrorString(status));
}

void TensorDescriptor::set(cudnnDataType_t dtype, int n, int c, int h, int w) {
  KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc_, CUDNN_TENSOR_NCHW, dtype, n, c, h, w));
}

void FilterDescriptor::set(cudnnDataType_t dtype, int o, int c, int kh, int kw) {
  KILN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(desc_, dtype, CUDNN_TENSOR_NCHW, o, c, kh, kw));
}

void ConvolutionDescriptor::set(int pad_h, int pad_w, int stride_h, int stride_w, int dilation_h, int dilation_w,
                                int groups, cudnnDataType_t compute, cudnnMathType_t math) {
  KILN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(desc_, pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w,
                                                   CUDNN_CROSS_CORRELATION, compute));
  KILN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(desc_, groups));
  set_math(math);
}
void ConvolutionDescriptor::set_math(cudnnMathType_t math) { KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(desc_, math)); }

}  // namespace kiln::cuda
