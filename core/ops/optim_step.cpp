// The optimizer updates' CPU front: checks, then the kernel of the capability in use.
#include <kiln/core/ops/optim_step.h>

#include <kiln/core/cpu/optim_step.h>
#include <kiln/core/error.h>

namespace kiln::ops {

void adamw_update_cpu(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                      const AdamWCoeffs& c) {
  KILN_CHECK_VALUE(p.dtype() == DType::f32 || p.dtype() == DType::f64, "AdamW on the CPU: parameters of dtype ",
                   p.dtype(), " are not supported (f32 or f64)");
  for (const Tensor* t : {&p, &g, &m, &v, &vmax}) {
    if (t == &vmax && !vmax.defined()) continue;
    KILN_CHECK_VALUE(t->device().is_cpu() && t->dtype() == p.dtype() && t->numel() == p.numel() && t->is_contiguous(),
                     "AdamW on the CPU: every buffer must be a contiguous CPU tensor of the parameter's dtype ",
                     p.dtype(), " and ", p.numel(), " elements; got ", t->dtype(), " ", t->shape(), " on ", t->device());
  }
  KILN_CPU_KERNEL(adamw_update)(p, g, m, v, vmax, c);
}

}  // namespace kiln::ops
