// Argument checks shared by the op fronts.
#include <kiln/core/ops/common.h>

#include <kiln/core/cuda/runtime/runtime.h>

namespace kiln::ops {

void check_cpu(const char* op, std::initializer_list<const Tensor*> tensors) {
  int i = 0;
  for (const Tensor* t : tensors) {
    KILN_CHECK(t->defined(), op, ": argument ", i, " is an undefined tensor");
    KILN_CHECK(t->device().is_cpu(), op, ": no kernel for tensors on ", t->device(),
               " yet (argument ", i, " of shape ", t->shape(), "); move it to the CPU with .to(Device::cpu())");
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
        KILN_CHECK(t->defined(), op, ": argument ", i++, " is an undefined tensor");
        check_same_device(op, **tensors.begin(), *t);
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
