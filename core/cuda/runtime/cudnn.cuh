// cuDNN plumbing shared by the cuDNN-backed ops (conv.cpp): a handle per thread and device bound
// to the device's current stream, RAII descriptors, and Kiln dtypes as cuDNN data types.
// CUDA-only (includes <cudnn.h>), hence .cuh: the installed package carries only *.h headers.
#pragma once

#include <cudnn.h>

#include <cstdint>

#include <kiln/core/cuda/runtime/cudnn_check.cuh>
#include <kiln/core/tensor.h>

namespace kiln::cuda {

// The calling thread's handle for t's device, its stream set to that device's current stream (the
// device is made current too). Created on first use per (thread, device); a thread that ends gives
// its handles back to a pool for the next thread; never destroyed (cuDNN may already be torn down
// at exit), like torch's handle pool.
cudnnHandle_t cudnn_handle_for(const Tensor& t);

// f32 -> FLOAT, f64 -> DOUBLE, f16 -> HALF, bf16 -> BFLOAT16; other dtypes fail naming `op`.
cudnnDataType_t cudnn_dtype(DType t, const char* op);

// v as an int for a cuDNN descriptor, failing with `what` when it does not fit.
int cudnn_int(int64_t v, const char* op, const char* what);

// Logs a failed destroy of a cuDNN descriptor (destructors never throw).
void cudnn_log_destroy(cudnnStatus_t status);

// Owns one cuDNN descriptor of type Desc: made by Create in the constructor, released by Destroy in
// the destructor (a failed destroy is logged, never thrown). Not copyable.
template <class Desc, cudnnStatus_t (*Create)(Desc*), cudnnStatus_t (*Destroy)(Desc)>
class Descriptor {
 public:
  Descriptor() { KILN_CUDNN_CHECK(Create(&desc_)); }
  ~Descriptor() { cudnn_log_destroy(Destroy(desc_)); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Desc get() const { return desc_; }

 protected:
  Desc desc_ = nullptr;
};

class TensorDescriptor
    : public Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor> {
 public:
  // A packed NCHW tensor.
  void set(cudnnDataType_t dtype, int n, int c, int h, int w);
};

class FilterDescriptor
    : public Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor> {
 public:
  // A packed (O, C/groups, kh, kw) filter.
  void set(cudnnDataType_t dtype, int o, int c, int kh, int kw);
};

class ConvolutionDescriptor : public Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                                                cudnnDestroyConvolutionDescriptor> {
 public:
  // Cross-correlation (torch's conv2d) computing in `compute`, with `groups` groups.
  void set(int pad_h, int pad_w, int stride_h, int stride_w, int dilation_h, int dilation_w, int groups,
           cudnnDataType_t compute, cudnnMathType_t math);
  void set_math(cudnnMathType_t math);
};

}  // namespace kiln::cuda
