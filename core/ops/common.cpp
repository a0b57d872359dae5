// Argument checks shared by the op fronts, and the storage-extent check (Note [Reads within the storage]).
#include <kiln/core/ops/common.h>

#include <algorithm>
#include <string>

#include <kiln/core/cuda/runtime/runtime.h>

namespace kiln::ops {

namespace {

// Whether every element of t lies inside its storage's bytes, which are not pending. A few integer
// operations per dim: this runs once per operand of every op.
bool in_storage(const Tensor& t) {
  const TensorImpl& impl = *t.impl();
  const Shape& shape = impl.shape();
  const Strides& strides = impl.strides();
  int64_t lo = impl.offset(), hi = impl.offset();  // elements
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return true;  // no elements: nothing is read
    const int64_t reach = (shape[d] - 1) * strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  const Storage& storage = *impl.storage();
  return !storage.is_pending() && lo >= 0 &&
         (hi + 1) * static_cast<int64_t>(dtype_size(impl.dtype())) <= static_cast<int64_t>(storage.nbytes());
}

[[noreturn]] void throw_outside_storage(const Tensor& t, const char* op, const std::string& arg) {
  const Storage& storage = *t.storage();
  const int64_t esize = static_cast<int64_t>(t.element_size());
  int64_t hi = t.offset();
  for (int64_t d = 0; d < t.dim(); ++d) hi += (t.shape()[d] - 1) * std::max<int64_t>(t.strides()[d], 0);
  const int64_t offset_bytes = std::max<int64_t>(t.offset(), 0) * esize;
  // A pending storage with a release note is, to its readers, released: the owner (FSDP, a prefetched
  // gather nobody waited for) writes it for reads it expects, and its note says why this one was not.
  std::string what =
      storage.is_pending() && storage.release_note() ? std::string(" lies in a released storage")
      : storage.is_pending()
          ? detail::str_cat(" lies in a storage whose bytes are still being written (pending: an asynchronous "
                            "write its owner has not waited for)")
          : detail::str_cat(" reaches byte ", (hi + 1) * esize, " of its storage, which holds ", storage.nbytes(),
                            storage.nbytes() == 0 ? " bytes (released)" : " bytes");
  std::string note = storage.release_note() ? storage.release_note()(static_cast<size_t>(offset_bytes))
                     : storage.is_pending()   ? "wait for the operation that writes it before using the tensor"
                                              : "the storage was resized (Storage::resize) after the tensor was "
                                                "made; resize it back before using the tensor";
  KILN_FAIL(op, ": ", arg, " of shape ", t.shape(), " (", t.dtype(), ", offset ", t.offset(), ")", what, ": ",
            note);
}

}  // namespace

void check_in_storage(const Tensor& t, const char* op, const char* arg) {
  check_defined(t, op, arg);
  if (!in_storage(t)) [[unlikely]]
    throw_outside_storage(t, op, arg);
}

void check_in_storage(const Tensor& t, const char* op, int arg) {
  KILN_CHECK_VALUE(t.defined(), op, ": argument ", arg, " is an undefined tensor");
  if (!in_storage(t)) [[unlikely]]
    throw_outside_storage(t, op, "argument " + std::to_string(arg));
}

void check_cpu(const char* op, std::initializer_list<const Tensor*> tensors) {
  int i = 0;
  for (const Tensor* t : tensors) {
    KILN_CHECK_VALUE(t->defined(), op, ": argument ", i, " is an undefined tensor");
    KILN_CHECK(t->device().is_cpu(), op, ": no kernel for tensors on ", t->device(),
               " yet (argument ", i, " of shape ", t->shape(), "); move it to the CPU with .to(Device::cpu())");
    check_in_storage(*t, op, i);
    ++i;
  }
}

bool on_cuda(const char* op, std::initializer_list<const Tensor*> tensors) {
  if constexpr (cuda::kBuilt) {
    bool any = false;
    for (const Tensor* t : tensors) any = any || (t->defined() && t->device().is_cuda());
    if (any) {
      int i = 0;
      for (const Tensor* t : tensors) {
        KILN_CHECK_VALUE(t->defined(), op, ": argument ", i, " is an undefined tensor");
        check_same_device(op, **tensors.begin(), *t);
        check_in_storage(*t, op, i);
        ++i;
      }
      return true;
    }
  }
  check_cpu(op, tensors);
  return false;
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.device() == b.device(), op, ": expected tensors on one device, got ", a.device(), " and ",
             b.device());
}

}  // namespace kiln::ops
