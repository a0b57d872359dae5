// GradScaler's device side (torch's _amp_foreach_non_finite_check_and_unscale_ and
// _amp_update_scale_): the scale, the growth tracker and the found_inf flags stay on the device, so
// unscaling, the cross-rank inf check and the scale update need no host sync.
#pragma once

#include <cstdint>
#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::cuda {

// Every gradient *= the f32 reciprocal of *scale (computed in double, as grad_scaler.cpp does), in
// place; *found_inf = 1 when an element was inf or NaN before unscaling (never reset to 0 here).
// grads: contiguous, floating, on the device of scale (0-dim f32) and found_inf (0-dim f32).
void amp_unscale(const std::vector<Tensor>& grads, const Tensor& scale, const Tensor& found_inf);

// torch._amp_update_scale_ on the device: when *found_inf, scale *= backoff_factor and the
// tracker resets; otherwise the tracker counts up and on reaching growth_interval the scale grows
// by growth_factor (kept only if finite) and the tracker resets. scale: 0-dim f32, growth_tracker:
// 0-dim i64, found_inf: 0-dim f32, all on one device. The products are rounded to f32 from double.
void amp_update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                      double growth_factor, double backoff_factor, int64_t growth_interval);

// out (0-dim f32) = 1 when any of `flags` (one-element f32) is non-zero, else 0; one device.
void amp_any_flag(const Tensor& out, const std::vector<Tensor>& flags);

// Every dst (one-element f32) = (src != 0) ? 1 : 0; src: one element of any dtype, same device.
void amp_set_flags(const std::vector<Tensor>& dsts, const Tensor& src);

}  // namespace kiln::cuda
