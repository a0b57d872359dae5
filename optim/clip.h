// Gradient clipping by total norm, torch.nn.utils.clip_grad_norm_ (1.13 semantics), on the CPU or
// on one CUDA device.
#pragma once

#include <limits>
#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::optim {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

/// Returns the total norm of all gradients (parameters without .grad are skipped; 0 when none has
/// one) as if they were one vector: (sum_i |g_i|^p)^(1/p), or max_i |g_i| for norm_type = kInfNorm.
/// It is computed in double whatever the gradients' dtype. Then every gradient is multiplied in
/// place by clip_coef = min(1, max_norm / (total + 1e-6)).
/// Non-finite norms, as torch 1.13 with error_if_nonfinite=false: a NaN total gives a NaN
/// coefficient and every gradient becomes NaN; an infinite total gives coefficient 0 (finite
/// entries become 0, infinite ones NaN). With error_if_nonfinite=true a non-finite total throws
/// kiln::Error instead and leaves the gradients untouched.
/// On CUDA the norm is reduced and the gradients scaled on the device (core/cuda/kernels/optim_step.h);
/// returning the double reads it back: one host sync. All gradients must share one device.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

/// clip_grad_norm returning the total norm as a 0-dim f64 tensor on the gradients' device (a CPU
/// tensor for CPU gradients or when none has a gradient), like torch's clip_grad_norm_. On CUDA the
/// coefficient is read by the scaling kernel on the device: no host sync, unless
/// error_if_nonfinite=true, which must read the norm before it may scale.
Tensor clip_grad_norm_tensor(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                             bool error_if_nonfinite = false);

}  // namespace kiln::optim
