// GradScaler (Note [GradScaler step] in grad_scaler.h): torch's per-optimizer stages, the inf/NaN
// check fused with unscaling, and torch._amp_update_scale_'s update rule on an f32 scale, on the
// CPU or with the state on a CUDA device (Note [GradScaler on CUDA], kernels in core/cuda/kernels/amp.h).
#include <kiln/optim/grad_scaler.h>

#include <cmath>
#include <set>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/cuda/kernels/amp.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/autograd/ops/elementwise.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/reduce.h>

namespace kiln::optim {

namespace {

void check_options(const GradScalerOptions& o, const char* op) {
  KILN_CHECK(std::isfinite(o.init_scale_) && o.init_scale_ > 0, op, ": init_scale must be finite and positive, got ",
             o.init_scale_);
  KILN_CHECK(o.growth_factor_ > 1.0 && std::isfinite(o.growth_factor_), op,
             ": growth_factor must be finite and > 1, got ", o.growth_factor_);
  KILN_CHECK(o.backoff_factor_ > 0.0 && o.backoff_factor_ < 1.0, op, ": backoff_factor must be in (0, 1), got ",
             o.backoff_factor_);
  KILN_CHECK(o.growth_interval_ > 0, op, ": growth_interval must be positive, got ", o.growth_interval_);
}

// The single value of a 0-dim entry `key` of `dict`, checked to have dtype `dt`.
double entry(const NamedTensors& dict, const std::string& key, DType dt) {
  for (const auto& [name, t] : dict) {
    if (name != key) continue;
    KILN_CHECK(t.defined() && t.numel() == 1 && t.dtype() == dt, "GradScaler::load_state_dict: '", key,
               "' must be a one-element ", dt, " tensor, got ",
               t.defined() ? std::string(dtype_name(t.dtype())) : std::string("undefined"),
               t.defined() ? t.shape() : Shape{});
    return t.item();
  }
  KILN_FAIL("GradScaler::load_state_dict: '", key, "' is missing");
  return 0;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  if (options_.enabled_) check_options(options_, "GradScaler");
  scale_ = static_cast<float>(options_.init_scale_);
}

void GradScaler::use_device(Device device, const char* op) const {
  if (on_cuda()) {
    KILN_CHECK(device == scale_dev_.device(), op, ": the scaler's state is on ", scale_dev_.device(),
               " but the tensors are on ", device, "; one GradScaler serves one device");
    return;
  }
  if (!device.is_cuda()) return;
  for (const auto& [opt, st] : per_optimizer_)
    KILN_CHECK(st.stage == Stage::ready, op, ": tensors on ", device, " after an optimizer was unscaled on the "
               "CPU in this iteration; one GradScaler serves one device");
  scale_dev_ = full(Shape{}, static_cast<double>(scale_), TensorOptions(DType::f32).device(device));
  tracker_dev_ = full(Shape{}, static_cast<double>(growth_tracker_), TensorOptions(DType::i64).device(device));
}

std::vector<Tensor> GradScaler::device_flags() const {
  std::vector<Tensor> flags;
  for (const auto& [opt, st] : per_optimizer_)
    if (st.found_inf_dev.defined()) flags.push_back(st.found_inf_dev);
  return flags;
}

Tensor GradScaler::scale(const Tensor& loss) const {
  check_defined(loss, "GradScaler::scale", "loss");
  if (!options_.enabled_) return loss;
  KILN_CHECK(is_floating(loss.dtype()), "GradScaler::scale: the loss must be floating, got ", loss.dtype());
  use_device(loss.device(), "GradScaler::scale");
  if (on_cuda()) return kiln::mul(loss, scale_dev_);  // f32 scale: an f16 loss is promoted, as in torch
  return kiln::mul(loss, static_cast<double>(scale_));
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled_) return;
  OptimizerState& st = per_optimizer_[&optimizer];
  KILN_CHECK(st.stage != Stage::unscaled, "GradScaler::unscale_: already called on this ", optimizer.name(),
             " optimizer since the last update() (scale ", scale_value(), ")");
  KILN_CHECK(st.stage != Stage::stepped, "GradScaler::unscale_: called after step() on this ", optimizer.name(),
             " optimizer; call update() first");
  NoGradGuard no_grad;
  std::vector<Tensor> grads = optimizer.step_gradients();  // a shared gradient once: unscaled once
  bool any_cuda = false;
  for (const Tensor& g : grads) any_cuda = any_cuda || g.device().is_cuda();
  if (any_cuda || on_cuda()) {
    for (const Tensor& g : grads) use_device(g.device(), "GradScaler::unscale_");
    Tensor flag = zeros(Shape{}, TensorOptions(DType::f32).device(scale_dev_.device()));
    std::vector<Tensor> work;  // contiguous: the gradients themselves, or copies written back
    for (const Tensor& g : grads) work.push_back(g.contiguous());
    if constexpr (cuda::kBuilt) cuda::amp_unscale(work, scale_dev_, flag);
    for (size_t i = 0; i < grads.size(); ++i)
      if (!work[i].is_same(grads[i])) grads[i].copy_(work[i]);
    st.found_inf_dev = flag;
    st.stage = Stage::unscaled;
    return;
  }
  // torch: inv_scale = scale.double().reciprocal().float(), and grad *= inv_scale.
  const double inv_scale = static_cast<double>(static_cast<float>(1.0 / static_cast<double>(scale_)));
  // Each gradient contributes sum(g * 0): 0 when finite, NaN as soon as one element is inf/NaN.
  // The sums are combined on the gradients' device and read once.
  Tensor probe;
  for (Tensor& g : grads) {
    Tensor s = ops::sum(ops::mul(g, 0.0));
    probe = probe.defined() ? ops::add(probe, s.to(probe.device())) : s;
    ops::mul_(g, inv_scale);
  }
  st.found_inf = probe.defined() && !std::isfinite(probe.item());
  st.stage = Stage::unscaled;
}

bool GradScaler::found_inf() const {
  if (on_cuda()) return found_inf_tensor().item() != 0.0;  // the host read
  for (const auto& [opt, st] : per_optimizer_)
    if (st.found_inf) return true;
  return false;
}

Tensor GradScaler::found_inf_tensor() const {
  if (!on_cuda()) return scalar_tensor(found_inf() ? 1.0 : 0.0, TensorOptions(DType::f32));
  Tensor out = empty(Shape{}, DType::f32, scale_dev_.device());
  if constexpr (cuda::kBuilt) cuda::amp_any_flag(out, device_flags());
  return out;
}

void GradScaler::set_found_inf(bool found) {
  if (!options_.enabled_) return;
  set_found_inf(scalar_tensor(found ? 1.0 : 0.0, TensorOptions(DType::f32)));
}

void GradScaler::set_found_inf(const Tensor& found) {
  if (!options_.enabled_) return;
  KILN_CHECK(found.defined() && found.numel() == 1, "GradScaler::set_found_inf: expected a one-element tensor, got ",
             found.defined() ? found.shape() : Shape{});
  KILN_CHECK(!per_optimizer_.empty(), "GradScaler::set_found_inf: no optimizer was unscaled this iteration "
             "(call unscale_ first, then combine found_inf() across ranks)");
  if (on_cuda()) {
    if constexpr (cuda::kBuilt) cuda::amp_set_flags(device_flags(), found.to(scale_dev_.device()));
    return;
  }
  const bool value = found.item() != 0.0;
  for (auto& [opt, st] : per_optimizer_) st.found_inf = value;
}

GradScaler::OptimizerState& GradScaler::prepare_step(Optimizer& optimizer) {
  auto it = per_optimizer_.find(&optimizer);
  KILN_CHECK(it == per_optimizer_.end() || it->second.stage != Stage::stepped, "GradScaler::step: already called "
             "on this ", optimizer.name(), " optimizer since the last update()");
  if (it == per_optimizer_.end() || it->second.stage == Stage::ready) unscale_(optimizer);
  OptimizerState& st = per_optimizer_.at(&optimizer);
  st.stage = Stage::stepped;
  return st;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled_) {
    optimizer.step();
    return true;
  }
  OptimizerState& st = prepare_step(optimizer);
  if (st.found_inf_dev.defined()) {
    optimizer.step(st.found_inf_dev);
    return st.found_inf_dev.item() == 0.0;  // the host read
  }
  if (st.found_inf) return false;
  optimizer.step();
  return true;
}

Tensor GradScaler::step_async(Optimizer& optimizer) {
  if (!options_.enabled_) {
    optimizer.step();
    return scalar_tensor(0.0, TensorOptions(DType::f32));
  }
  OptimizerState& st = prepare_step(optimizer);
  if (st.found_inf_dev.defined()) {
    optimizer.step(st.found_inf_dev);
    Tensor out = empty(Shape{}, DType::f32, st.found_inf_dev.device());  // a copy: the flag stays ours
    if constexpr (cuda::kBuilt) cuda::amp_set_flags({out}, st.found_inf_dev);
    return out;
  }
  if (!st.found_inf) optimizer.step();
  return scalar_tensor(st.found_inf ? 1.0 : 0.0, TensorOptions(DType::f32));
}

void GradScaler::update() {
  if (!options_.enabled_) return;
  KILN_CHECK(!per_optimizer_.empty(), "GradScaler::update: no inf checks were recorded this iteration "
             "(call step() or unscale_ before update())");
  if (on_cuda()) {
    if constexpr (cuda::kBuilt)
      cuda::amp_update_scale(scale_dev_, tracker_dev_, found_inf_tensor(), options_.growth_factor_,
                             options_.backoff_factor_, options_.growth_interval_);
    per_optimizer_.clear();
    return;
  }
  if (found_inf()) {
    scale_ = static_cast<float>(scale_ * options_.backoff_factor_);
    growth_tracker_ = 0;
  } else if (growth_tracker_ + 1 == options_.growth_interval_) {
    const float grown = static_cast<float>(scale_ * options_.growth_factor_);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    ++growth_tracker_;
  }
  per_optimizer_.clear();
}

double GradScaler::scale_value() const { return on_cuda() ? scale_dev_.item() : static_cast<double>(scale_); }

int64_t GradScaler::growth_tracker() const {
  return on_cuda() ? static_cast<int64_t>(tracker_dev_.item()) : growth_tracker_;
}

NamedTensors GradScaler::state_dict() const {
  if (!options_.enabled_) return {};
  return {{"scale", scalar_tensor(scale_value(), TensorOptions(DType::f32))},
          {"growth_tracker", scalar_tensor(static_cast<double>(growth_tracker()), TensorOptions(DType::i64))},
          {"growth_factor", scalar_tensor(options_.growth_factor_, TensorOptions(DType::f64))},
          {"backoff_factor", scalar_tensor(options_.backoff_factor_, TensorOptions(DType::f64))},
          {"growth_interval", scalar_tensor(static_cast<double>(options_.growth_interval_), TensorOptions(DType::i64))}};
}

void GradScaler::load_state_dict(const NamedTensors& dict) {
  if (!options_.enabled_) return;
  KILN_CHECK(!dict.empty(), "GradScaler::load_state_dict: the state dict is empty (it was saved from a disabled "
             "GradScaler?)");
  static const std::set<std::string> kKeys = {"scale", "growth_tracker", "growth_factor", "backoff_factor",
                                              "growth_interval"};
  for (const auto& [name, t] : dict)
    KILN_CHECK(kKeys.count(name), "GradScaler::load_state_dict: unexpected entry '", name, "'");
  GradScalerOptions o = options_;
  o.init_scale_ = entry(dict, "scale", DType::f32);
  o.growth_factor_ = entry(dict, "growth_factor", DType::f64);
  o.backoff_factor_ = entry(dict, "backoff_factor", DType::f64);
  o.growth_interval_ = static_cast<int64_t>(entry(dict, "growth_interval", DType::i64));
  const auto tracker = static_cast<int64_t>(entry(dict, "growth_tracker", DType::i64));
  check_options(o, "GradScaler::load_state_dict");
  KILN_CHECK(tracker >= 0 && tracker < o.growth_interval_, "GradScaler::load_state_dict: growth_tracker ", tracker,
             " is outside [0, growth_interval ", o.growth_interval_, ")");
  o.init_scale_ = options_.init_scale_;  // the constructor's option; the live scale is scale_
  options_ = o;
  scale_ = static_cast<float>(entry(dict, "scale", DType::f32));
  growth_tracker_ = tracker;
  if (on_cuda()) {
    scale_dev_.copy_(scalar_tensor(static_cast<double>(scale_), TensorOptions(DType::f32)));
    tracker_dev_.copy_(scalar_tensor(static_cast<double>(growth_tracker_), TensorOptions(DType::i64)));
  }
}

}  // namespace kiln::optim
