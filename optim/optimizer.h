// Optimizer: the base of SGD and AdamW (torch.optim.Optimizer). It owns parameter groups (tensors
// plus typed hyper-parameters), lazily created per-parameter state, zero_grad, and a state_dict
// that is a flat list of named tensors, so it can be written into a safetensors file as it is.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::optim {

/// Named tensors in a fixed order: what state_dict() returns and what checkpoints store.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// Hyper-parameters by name (bools as 0/1); how options cross state_dict().
using HyperParams = std::map<std::string, double>;

/// State of one parameter: the number of updates it received (0 = no state yet) and its buffers
/// ("momentum_buffer", "exp_avg", ...), each shaped, typed and placed like the parameter.
/// A CUDA parameter's count lives on its device as well (Note [Device step counts]).
struct ParamState {
  int64_t step = 0;
  std::map<std::string, Tensor> buffers;
  Tensor device_step;  ///< CUDA parameters: 0-dim i64 on the parameter's device; else undefined
};

// Note [Device step counts]
// On CUDA, SGD and AdamW update all parameters of a group with fused multi-tensor kernels
// (core/cuda/kernels/optim_step.h), and step(found_inf) lets those kernels skip the update on the device
// when GradScaler found an inf, so the host cannot know whether an update happened without a
// sync. A CUDA parameter's step count therefore lives on the device (ParamState::device_step),
// advanced by the kernels only when they update; AdamW's bias corrections are computed from it
// there, in double as on the CPU, and SGD starts a momentum buffer on its first real update.
// ParamState::step is brought up to date from the device (one host sync) by state() and
// state_dict(); the fields are reconciled when a parameter moves between devices.

/// A parameter group: tensors updated with one set of options (SGDOptions, AdamWOptions).
template <class Options>
struct ParamGroup {
  std::vector<Tensor> params;
  Options options;
};

/// Note [Optimizer state_dict]
/// state_dict() is a list of named tensors; nothing else is needed to restore an optimizer that
/// was built with the same parameter groups (same sizes, shapes and dtypes):
///   "param_groups.<g>.num_params"   0-dim i64: number of parameters in group g (checked on load)
///   "param_groups.<g>.<name>"       0-dim f64: every hyper-parameter of group g (lr, weight_decay,
///                                   momentum, beta1, ..., nesterov/amsgrad as 0/1, initial_lr
///                                   once an LRScheduler recorded it)
///   "state.<g>.<i>.step"            0-dim i64: updates applied to parameter i of group g
///   "state.<g>.<i>.<key>"           that parameter's buffers, shape and dtype of the parameter
/// Parameters that never had a gradient have no "state.<g>.<i>.*" entries. load_state_dict
/// validates the whole dict (group count and sizes, every hyper-parameter present and no unknown
/// one, every state buffer the loaded hyper-parameters require, shapes, dtypes) before it changes
/// anything, so a rejected dict leaves the optimizer as it was. Loaded buffers are copied into
/// fresh tensors on the parameter's device: the optimizer never aliases the caller's tensors.
/// The other way round, state_dict()'s buffers ARE the live state (as in torch): write or clone
/// them before the next step() if a snapshot is wanted.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter that has a gradient, under NoGradGuard.
  virtual void step() = 0;
  /// step(), skipped when `found_inf` (one element, e.g. GradScaler's flag) is non-zero; an
  /// undefined flag never skips. SGD and AdamW hand the flag of CUDA parameters to their kernels,
  /// which read it on the device (no host sync; Note [Device step counts]); CPU parameters, and
  /// optimizers that do not override this, read it once on the host.
  virtual void step(const Tensor& found_inf);

  /// Note [Learning rate on the device]
  /// A CUDA graph bakes a kernel's arguments in when it is captured, but a schedule changes lr every
  /// step. So while this thread captures (cuda::is_capturing()), SGD and AdamW hand their CUDA kernels
  /// a device copy of each group's lr (0-dim f64 per group and device) that the kernels read when
  /// they run, and refresh_device_lr() writes the groups' current lr into those copies (a fill
  /// queued on the current stream, so before a replay queued after it). It must run once before the
  /// capture (it creates the copies; creating one inside a capture would bake its value in) and
  /// before every replay. Outside a capture the kernels take lr as an argument, as always. The
  /// Trainer does both (TrainerOptions::cuda_graph). No-op for an optimizer without CUDA kernels.
  virtual void refresh_device_lr() {}

  /// Clears every parameter's .grad (set_to_none, the torch 2.x default) or zeroes it in place.
  /// Virtual: a wrapper also drops the gradient copies it keeps (ShardedOptimizer's master gradients).
  virtual void zero_grad(bool set_to_none = true);

  /// The gradients the next step() reads, each once (a gradient two parameters share appears once):
  /// what GradScaler::unscale_ unscales and checks for inf/NaN. Here every parameter's defined
  /// .grad; a wrapper that steps from elsewhere (dist::ShardedOptimizer under ZeRO-2 and FSDP: the
  /// reduce-scattered shard) returns those tensors instead.
  virtual std::vector<Tensor> step_gradients() const;

  size_t num_param_groups() const { return params_.size(); }  ///< parameter groups
  const std::vector<Tensor>& params(size_t group) const;  ///< the group's parameters
  double lr(size_t group) const { return hyper_params(group).at("lr"); }  ///< the group's learning rate
  void set_lr(size_t group, double lr);  ///< what a scheduler calls
  /// The base lr an LRScheduler scales (torch's group["initial_lr"]); NaN until one records it.
  double initial_lr(size_t group) const;
  void set_initial_lr(size_t group, double lr);  ///< set by LRScheduler

  /// State of parameter `index` of `group` (step 0 and no buffers before its first update). For a
  /// CUDA parameter, reading `step` from the device costs a host sync.
  const ParamState& state(size_t group, size_t index) const;

  /// Virtual so that a wrapper (dist::ShardedOptimizer) can store sharded state in this format.
  virtual NamedTensors state_dict() const;
  /// Throws kiln::Error naming the problem (and changes nothing) when `dict` does not fit.
  virtual void validate_state_dict(const NamedTensors& dict) const;
  virtual void load_state_dict(const NamedTensors& dict);  ///< validates, then loads (Note above)

  /// Group `group`'s hyper-parameters by name, and their update (checked as add_param_group's);
  /// the names of the state buffers each parameter of the group holds once updated.
  HyperParams hyper_parameters(size_t group) const { return hyper_params(group); }
  void set_hyper_parameters(size_t group, const HyperParams& values);
  std::vector<std::string> state_buffer_names(size_t group) const { return state_keys(hyper_params(group)); }

  /// The optimizer's name, for messages ("SGD", "AdamW").
  const std::string& name() const { return name_; }

 protected:
  explicit Optimizer(std::string name) : name_(std::move(name)) {}
  void set_name(std::string name) { name_ = std::move(name); }  ///< a wrapper takes the wrapped one's

  /// Derived classes describe their hyper-parameters; the base stores and serialises them.
  virtual HyperParams hyper_params(size_t group) const = 0;
  /// Called only with a map that holds exactly the names hyper_params() returns.
  virtual void set_hyper_params(size_t group, const HyperParams& values) = 0;
  /// The buffers a parameter's state holds under the given hyper-parameters.
  virtual std::vector<std::string> state_keys(const HyperParams& values) const = 0;
  /// Checks values a user may set (lr >= 0, betas in [0, 1), ...) naming the optimizer.
  virtual void check_hyper_params(const HyperParams& values) const = 0;

  /// The dtype of a parameter's state buffers (its own; a master-weight wrapper's f32 for 16-bit ones).
  virtual DType state_dtype(const Tensor& param) const { return param.dtype(); }
  /// Registers a group's parameters (checks: defined, f32/f64, leaf, not already in a group).
  /// sixteen_bit: bf16/f16 parameters are accepted too, for a wrapper that steps f32 master copies
  /// of them (ShardedOptimizer with a 16-bit MixedPrecisionPolicy) and never updates them itself.
  void add_params(std::vector<Tensor> params, bool sixteen_bit = false);
  ParamState& mutable_state(size_t group, size_t index);  ///< step as last written (no device read)
  /// mutable_state() made ready for an update of the parameter where it now lives: buffers on
  /// another device are moved there, and the step count is carried between `step` and
  /// `device_step` (Note [Device step counts]); a CUDA parameter always gets a device_step.
  ParamState& state_for_update(size_t group, size_t index);

  /// The gradient to apply to parameter (group, index), or an undefined tensor when it has none;
  /// checks the gradient's shape, dtype and device against the parameter's.
  Tensor grad_for_update(size_t group, size_t index) const;

  /// step(found_inf)'s flag as the CUDA kernels on `device` read it: a one-element f32 tensor there
  /// (an undefined flag stays undefined).
  static Tensor found_inf_on(const Tensor& found_inf, Device device);

  /// Whether step(found_inf) skips the parameters that live on the CPU: the flag is read on the
  /// host once, when the first of them asks.
  class HostSkip {
   public:
    explicit HostSkip(Tensor found_inf) : found_inf_(std::move(found_inf)) {}
    bool operator()();

   private:
    Tensor found_inf_;
    int value_ = -1;  ///< -1: not read yet
  };

 private:
  std::string name_;
  std::vector<std::vector<Tensor>> params_;
  std::vector<std::vector<ParamState>> state_;  ///< parallel to params_
  std::vector<double> initial_lr_;              ///< NaN: none recorded
};

}  // namespace kiln::optim
