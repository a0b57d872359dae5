// The owning backend descriptor of cudnn_backend.cuh and cuDNN's last error message.
#include <kiln/core/cuda/runtime/cudnn_backend.cuh>

#include <cstdio>
#include <utility>

namespace kiln::cuda {

std::string cudnn_last_error() {
  char message[2048] = {0};
  cudnnGetLastErrorString(message, sizeof message);
  std::string s(message);
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

BackendDescriptor::BackendDescriptor(cudnnBackendDescriptorType_t type) {
  KILN_CUDNN_BACKEND_CHECK(cudnnBackendCreateDescriptor(type, &desc_));
}

BackendDescriptor::~BackendDescriptor() {
  if (!desc_) return;
  const cudnnStatus_t status = cudnnBackendDestroyDescriptor(desc_);
  if (status != CUDNN_STATUS_SUCCESS)
    std::fprintf(stderr, "kiln: destroying a cuDNN backend descriptor failed: %s\n", cudnnGetErrorString(status));
}

BackendDescriptor::BackendDescriptor(BackendDescriptor&& other) noexcept : desc_(std::exchange(other.desc_, nullptr)) {}

BackendDescriptor& BackendDescriptor::operator=(BackendDescriptor&& other) noexcept {
  if (this != &other) {
    BackendDescriptor old(std::move(*this));  // released at the end of this scope
    desc_ = std::exchange(other.desc_, nullptr);
  }
  return *this;
}

BackendDescriptor& BackendDescriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                                          int64_t count, const void* values) {
  KILN_ASSERT(desc_, "setting an attribute of an empty cuDNN backend descriptor");
  const cudnnStatus_t status = cudnnBackendSetAttribute(desc_, name, type, count, values);
  KILN_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN error ", static_cast<int>(status), " (",
             cudnnGetErrorString(status), ") setting backend attribute ", static_cast<int>(name), ": ",
             cudnn_last_error());
  return *this;
}

BackendDescriptor& BackendDescriptor::set_int64(cudnnBackendAttributeName_t name, int64_t value) {
  return set(name, CUDNN_TYPE_INT64, 1, &value);
}

BackendDescriptor& BackendDescriptor::set_int64s(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values) {
  return set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data());
}

BackendDescriptor& BackendDescriptor::set_bool(cudnnBackendAttributeName_t name, bool value) {
  return set(name, CUDNN_TYPE_BOOLEAN, 1, &value);
}

BackendDescriptor& BackendDescriptor::set_dtype(cudnnBackendAttributeName_t name, cudnnDataType_t value) {
  return set(name, CUDNN_TYPE_DATA_TYPE, 1, &value);
}

BackendDescriptor& BackendDescriptor::set_handle(cudnnBackendAttributeName_t name, cudnnHandle_t handle) {
  return set(name, CUDNN_TYPE_HANDLE, 1, &handle);
}

BackendDescriptor& BackendDescriptor::set_desc(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value) {
  KILN_ASSERT(value, "passing an empty cuDNN backend descriptor as attribute ", static_cast<int>(name));
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}

BackendDescriptor& BackendDescriptor::set_descs(cudnnBackendAttributeName_t name,
                                                const std::vector<cudnnBackendDescriptor_t>& values) {
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(values.size()), values.data());
}

BackendDescriptor& BackendDescriptor::finalize() {
  KILN_CUDNN_BACKEND_CHECK(try_finalize());
  return *this;
}

cudnnStatus_t BackendDescriptor::try_finalize() {
  KILN_ASSERT(desc_, "finalizing an empty cuDNN backend descriptor");
  return cudnnBackendFinalize(desc_);
}

int64_t BackendDescriptor::get_int64(cudnnBackendAttributeName_t name) const {
  KILN_ASSERT(desc_, "reading an attribute of an empty cuDNN backend descriptor");
  int64_t value = 0, count = 0;
  KILN_CUDNN_BACKEND_CHECK(cudnnBackendGetAttribute(desc_, name, CUDNN_TYPE_INT64, 1, &count, &value));
  return value;
}

}  // namespace kiln::cuda
