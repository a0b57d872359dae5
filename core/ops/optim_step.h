// The optimizer updates' front on the CPU: optim/adamw.cpp computes the per-step scalars and hands
// each parameter to the kernel of the CPU capability in use (core/cpu/optim_step.cpp).
#pragma once

#include <kiln/core/tensor.h>

namespace kiln::ops {

// AdamW's per-step scalars, computed in double as torch does in Python; the kernel rounds each
// to the parameter's dtype once.
struct AdamWCoeffs {
  double decay = 1, beta1 = 0.9, one_minus_beta1 = 0.1, beta2 = 0.999, one_minus_beta2 = 0.001;
  double bias_correction2_sqrt = 1, eps = 1e-8, neg_step_size = 0;
};

// torch.optim.AdamW (1.13, single-tensor path) on one CPU parameter, in place, in torch's order:
// p *= decay; m = m*beta1 + (1-beta1)*g; v = v*beta2 + (1-beta2)*g*g; vmax = max(vmax, v) (NaN
// wins); p += neg_step_size * m / (sqrt(vmax or v) / bias_correction2_sqrt + eps). p, g, m, v and
// vmax (undefined without amsgrad): contiguous CPU tensors of p's numel and one dtype, f32 or f64.
void adamw_update_cpu(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                      const AdamWCoeffs& c);

}  // namespace kiln::ops
