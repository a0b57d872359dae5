// Tensor::copy_, fill_ and to(Device): the one place dtype conversion and device transfer happen.
// Same-device CUDA copies go to cuda::copy_device, transfers to cuda::copy_across.
#include <kiln/core/cpu/copy.h>
#include <kiln/core/cuda/kernels/copy.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/ops/common.h>
#include <kiln/core/tensor.h>

namespace kiln {

static bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage()) return false;
  auto span = [](const Tensor& t) {
    int64_t lo = t.offset(), hi = t.offset();
    for (int64_t d = 0; d < t.dim(); ++d) hi += (t.shape()[d] - 1) * t.strides()[d];
    return std::pair{lo * int64_t(t.element_size()), (hi + 1) * int64_t(t.element_size())};
  };
  auto [a0, a1] = span(a);
  auto [b0, b1] = span(b);
  return a0 < b1 && b0 < a1;
}

// A copy within one CUDA device; a build without CUDA has no CUDA tensors to get here.
static void copy_on_device(const Tensor& dst, const Tensor& src) {
  if constexpr (cuda::kBuilt)
    cuda::copy_device(dst, src);
  else
    cuda::copy_across(dst, src);  // says Kiln was built without CUDA
}

Tensor& Tensor::copy_(const Tensor& src, bool non_blocking) {
  check_defined(*this, "copy_", "destination");
  check_defined(src, "copy_", "source");
  ops::check_in_storage(*this, "copy_", "destination");  // Note [Reads within the storage]
  ops::check_in_storage(src, "copy_", "source");
  KILN_CHECK_VALUE(broadcast_shapes(shape(), src.shape(), "copy_") == shape(), "copy_: source of shape ", src.shape(),
                   " cannot be broadcast to the destination's shape ", shape());
  if (numel() == 0) return *this;
  Tensor s = src.expand(shape());
  if (device() == s.device()) {
    if (overlaps(*this, s)) s = s.clone();
    if (device().is_cpu())
      KILN_CPU_KERNEL(copy)(*this, s);
    else
      copy_on_device(*this, s);
    return *this;
  }
  cuda::copy_across(*this, s, non_blocking);
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_defined(*this, "fill_");
  ops::check_in_storage(*this, "fill_", "tensor");
  if (numel() == 0) return *this;
  if (device().is_cuda()) {
    cuda::fill(*this, value);
    return *this;
  }
  KILN_CPU_KERNEL(fill)(*this, value);
  return *this;
}

Tensor Tensor::to(Device device, bool non_blocking) const {
  check_defined(*this, "Tensor::to");
  if (device == this->device()) return *this;
  // A non-blocking download lands in pinned memory, or it could not be asynchronous.
  Tensor out = non_blocking && device.is_cpu() && this->device().is_cuda()
                   ? make_tensor(Storage::allocate_pinned(nbytes()), dtype(), shape(), contiguous_strides(shape()))
                   : empty(shape(), dtype(), device);
  out.copy_(*this, non_blocking);
  if (auto hook = impl()->autograd_meta() ? detail::autograd_derived_hook() : nullptr)
    return hook(*this, out, {detail::Derivation::Kind::copy, nullptr, nullptr});
  return out;
}

}  // namespace kiln
