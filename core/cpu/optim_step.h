// The optimizer updates on the CPU (optim/adamw.cpp's per-element loop), compiled per capability;
// the CUDA twin is core/cuda/kernels/optim_step.h, the front core/ops/optim_step.h.
#pragma once

#include <kiln/core/cpu/kernel_set.h>
#include <kiln/core/ops/optim_step.h>
#include <kiln/core/tensor.h>

namespace kiln::cpu {
KILN_CPU_DECLARE_KERNELS(
// torch.optim.AdamW's update, in place; see ops::adamw_update.
void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                  const ops::AdamWCoeffs& c);
)
}  // namespace kiln::cpu
