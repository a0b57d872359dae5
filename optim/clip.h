// Gradient clipping by total norm, torch.nn.utils.clip_grad_norm_ (1.13 semantics).
#pragma once

#include <limits>
#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::optim {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// Returns the total norm of all gradients (parameters without .grad are skipped; 0 when none has
// one) as if they were one vector: (sum_i |g_i|^p)^(1/p), or max_i |g_i| for norm_type = kInfNorm.
// It is computed in double whatever the gradients' dtype. Then every gradient is multiplied in
// place by clip_coef = min(1, max_norm / (total + 1e-6)).
// Non-finite norms, as torch 1.13 with error_if_nonfinite=false: a NaN total gives a NaN
// coefficient and every gradient becomes NaN; an infinite total gives coefficient 0 (finite
// entries become 0, infinite ones NaN). With error_if_nonfinite=true a non-finite total throws
// kiln::Error instead and leaves the gradients untouched.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

}  // namespace kiln::optim
