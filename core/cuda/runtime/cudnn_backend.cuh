// cuDNN's backend (graph) API in C, made safe to hold: an owning descriptor with typed attribute
// setters, and KILN_CUDNN_BACKEND_CHECK, which adds cuDNN's own last error message (the backend's
// statuses alone rarely say which attribute was wrong). Used by the fused attention graphs
// (kernels/attention_cudnn_graph.cpp). CUDA-only (includes <cudnn.h>), hence .cuh.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/error.h>

// Like KILN_CUDNN_CHECK, with cuDNN's message about the failed call (cudnnGetLastErrorString).
#define KILN_CUDNN_BACKEND_CHECK(expr)                                                            \
  do {                                                                                            \
    cudnnStatus_t kiln_status_ = (expr);                                                          \
    KILN_CHECK(kiln_status_ == CUDNN_STATUS_SUCCESS, "cuDNN error ", static_cast<int>(kiln_status_), \
               " (", cudnnGetErrorString(kiln_status_), ") in ", #expr, ": ",                    \
               ::kiln::cuda::cudnn_last_error());                                                 \
  } while (0)

namespace kiln::cuda {

// cuDNN's message about the last failed call on this thread, on one line ("" when none).
std::string cudnn_last_error();

// Owns one cudnnBackendDescriptor_t: created in the constructor, destroyed in the destructor (a
// failed destroy is logged, never thrown). Movable, not copyable. The setters throw on a failed
// cudnnBackendSetAttribute and return *this, so a descriptor reads as one chain.
class BackendDescriptor {
 public:
  BackendDescriptor() = default;  // holds nothing
  explicit BackendDescriptor(cudnnBackendDescriptorType_t type);
  ~BackendDescriptor();
  BackendDescriptor(BackendDescriptor&& other) noexcept;
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept;
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }
  bool defined() const { return desc_ != nullptr; }

  BackendDescriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                         const void* values);
  BackendDescriptor& set_int64(cudnnBackendAttributeName_t name, int64_t value);
  BackendDescriptor& set_int64s(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values);
  BackendDescriptor& set_bool(cudnnBackendAttributeName_t name, bool value);
  BackendDescriptor& set_dtype(cudnnBackendAttributeName_t name, cudnnDataType_t value);
  BackendDescriptor& set_handle(cudnnBackendAttributeName_t name, cudnnHandle_t handle);
  BackendDescriptor& set_desc(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value);
  BackendDescriptor& set_desc(cudnnBackendAttributeName_t name, const BackendDescriptor& value) {
    return set_desc(name, value.get());
  }
  BackendDescriptor& set_descs(cudnnBackendAttributeName_t name, const std::vector<cudnnBackendDescriptor_t>& values);

  // Finalizes, throwing on failure; try_finalize returns cuDNN's status instead.
  BackendDescriptor& finalize();
  cudnnStatus_t try_finalize();

  // One INT64 attribute (a workspace size, an engine index); throws when cuDNN cannot answer.
  int64_t get_int64(cudnnBackendAttributeName_t name) const;

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

}  // namespace kiln::cuda
