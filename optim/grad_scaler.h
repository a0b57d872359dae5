// GradScaler: dynamic loss scaling for f16 training (torch.cuda.amp.GradScaler semantics). The
// loss is multiplied by the scale before backward so small f16 gradients do not flush to zero;
// the gradients are divided back before the step, which is skipped when any of them overflowed.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include <kiln/core/arg.h>
#include <kiln/optim/optimizer.h>

namespace kiln::optim {

/// Options of GradScaler (torch.cuda.amp.GradScaler's arguments).
struct GradScalerOptions {
  KILN_ARG(double, init_scale) = 65536.0;  ///< 2^16
  KILN_ARG(double, growth_factor) = 2.0;
  KILN_ARG(double, backoff_factor) = 0.5;
  KILN_ARG(int64_t, growth_interval) = 2000;
  KILN_ARG(bool, enabled) = true;

};

/// Note [GradScaler step]
/// Per iteration, as torch:
///   scaler.scale(loss).backward();
///   scaler.unscale_(opt);                 // optional: only to clip or inspect true gradients
///   clip_grad_norm(params, 1.0);
///   scaler.step(opt);                     // unscale_ if not done; skipped when found_inf
///   scaler.update();                      // backoff on inf, growth after growth_interval clean steps
/// The scale is an f32 value, updated exactly as torch._amp_update_scale_: on inf, scale *=
/// backoff_factor and the growth tracker resets; otherwise the tracker counts up and on reaching
/// growth_interval the scale grows by growth_factor (only if the result is finite) and the tracker
/// resets. unscale_ multiplies each gradient by the f32 reciprocal of the scale (also non-finite
/// ones: the step is skipped anyway) and records whether any gradient holds an inf or a NaN.
/// Data parallel: every rank must skip the same steps, so between unscale_ and step the trainer
/// all-reduces found_inf() with MAX and writes the result back with set_found_inf().
/// Several optimizers: each records its own found_inf and step(opt) skips on its own flag;
/// update() backs off when any of them found one; set_found_inf() sets all of them.
/// With enabled = false every call is a pass-through: scale returns the loss, step just steps.
/// BF16 autocast needs no scaler (bf16 has f32's exponent range).
///
/// Note [GradScaler on CUDA]
/// The first CUDA loss (scale) or CUDA gradients (unscale_) move the scaler to that device: from
/// then on the scale (0-dim f32), the growth tracker (0-dim i64) and each optimizer's found_inf
/// flag (0-dim f32) live there and are changed only by kernels (core/cuda/kernels/amp.h), as torch's
/// _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_ do, so an iteration needs no
/// host sync: unscale_ sets the flag on the device, found_inf_tensor() / set_found_inf(Tensor)
/// carry it through a cross-rank all-reduce (MAX) without leaving the device, step_async() hands
/// it to Optimizer::step(found_inf), whose kernels skip themselves, and update() runs on the
/// device. What reads a value on the host syncs once: found_inf(), step() (its bool),
/// scale_value(), growth_tracker(), state_dict(). The arithmetic is the CPU path's.
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// loss * scale (differentiable: backward yields scaled gradients); loss itself when disabled.
  Tensor scale(const Tensor& loss) const;
  /// Divides every gradient of `optimizer`'s parameters by the scale in place (no grad recording)
  /// and records found_inf. Once per optimizer between update()s: a second call is an error.
  void unscale_(Optimizer& optimizer);
  /// Whether an unscaled gradient this iteration was inf/NaN (any optimizer unscaled so far).
  bool found_inf() const;
  /// The same as a fresh 0-dim f32 tensor (1 or 0) on the scaler's device: all-reduce it with MAX
  /// across ranks and hand it back to set_found_inf(Tensor) without a host sync.
  Tensor found_inf_tensor() const;
  /// Overrides found_inf for every optimizer unscaled this iteration (the cross-rank result).
  void set_found_inf(bool found);
  /// The same from a one-element tensor (non-zero: found), read on the device when on CUDA.
  void set_found_inf(const Tensor& found);
  /// unscale_ when not done yet, then optimizer.step() unless found_inf; true when it stepped.
  bool step(Optimizer& optimizer);
  /// step() without reading the answer: the optimizer gets the found_inf flag (on CUDA its
  /// kernels skip themselves on the device) and the flag is returned as a fresh 0-dim f32 tensor
  /// (1: the step was skipped) on the scaler's device (the CPU until it moved).
  Tensor step_async(Optimizer& optimizer);
  /// Updates the scale from this iteration's found_inf and starts the next iteration.
  void update();

  double scale_value() const;      ///< a host read of the device scale on CUDA
  int64_t growth_tracker() const;  ///< likewise
  bool is_enabled() const { return options_.enabled_; }
  const GradScalerOptions& options() const { return options_; }

  /// "scale" (0-dim f32), "growth_tracker" (0-dim i64), "growth_factor", "backoff_factor"
  /// (0-dim f64), "growth_interval" (0-dim i64); empty when disabled (as torch). Put it into a
  /// checkpoint through TrainingProgress::extra (optim/checkpoint.h).
  NamedTensors state_dict() const;
  /// Validates the whole dict (every key, dtype and value) before changing anything; the loaded
  /// options replace the constructor's. Ignored when disabled, as torch.
  void load_state_dict(const NamedTensors& dict);

 private:
  enum class Stage { ready, unscaled, stepped };
  struct OptimizerState {
    Stage stage = Stage::ready;
    bool found_inf = false;  ///< on the CPU
    Tensor found_inf_dev;    ///< on CUDA (Note [GradScaler on CUDA]): 0-dim f32, defined once unscaled
  };

  /// Moves the scaler to `device` if it is a CUDA device and the scaler is still on the CPU; checks
  /// that tensors on `device` fit a scaler already on CUDA.
  void use_device(Device device, const char* op) const;
  bool on_cuda() const { return scale_dev_.defined(); }
  /// unscale_ if needed and mark the optimizer stepped (step, step_async).
  OptimizerState& prepare_step(Optimizer& optimizer);
  std::vector<Tensor> device_flags() const;  ///< this iteration's found_inf_dev tensors

  GradScalerOptions options_;
  float scale_;                 ///< the scale while on the CPU
  int64_t growth_tracker_ = 0;  ///< likewise
  /// On CUDA these hold the truth instead; created on first use by scale() (const), hence mutable.
  mutable Tensor scale_dev_;    ///< 0-dim f32
  mutable Tensor tracker_dev_;  ///< 0-dim i64
  std::map<const Optimizer*, OptimizerState> per_optimizer_;  ///< this iteration's, cleared by update()
};

}  // namespace kiln::optim
