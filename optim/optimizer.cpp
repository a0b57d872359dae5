// Optimizer base: parameter registration, zero_grad, and the state_dict of Note [Optimizer
// state_dict] in optimizer.h (validated whole before anything is changed).
#include <kiln/optim/optimizer.h>

#include <cmath>
#include <limits>
#include <set>

#include <kiln/autograd/grad_mode.h>
#include <kiln/autograd/meta.h>
#include <kiln/core/factory.h>

namespace kiln::optim {

namespace {

std::string group_key(size_t g, const std::string& name) {
  return "param_groups." + std::to_string(g) + "." + name;
}
std::string state_key(size_t g, size_t i, const std::string& name) {
  return "state." + std::to_string(g) + "." + std::to_string(i) + "." + name;
}

// A 0-dim (or one-element) tensor's value; fails naming the key otherwise.
double scalar_value(const std::string& opt, const std::string& key, const Tensor& t) {
  KILN_CHECK(t.defined() && t.numel() == 1, opt, ".load_state_dict: '", key,
             "' must hold one number, got a tensor of shape ", t.defined() ? t.shape() : Shape{});
  return t.item();
}

}  // namespace

const std::vector<Tensor>& Optimizer::params(size_t group) const {
  KILN_CHECK(group < params_.size(), name_, ": no parameter group ", group, " (there are ", params_.size(), ")");
  return params_[group];
}

void Optimizer::set_lr(size_t group, double lr) {
  HyperParams hp = hyper_params(group);
  hp["lr"] = lr;
  check_hyper_params(hp);
  set_hyper_params(group, hp);
}

void Optimizer::set_hyper_parameters(size_t group, const HyperParams& values) {
  HyperParams current = hyper_params(group);
  for (const auto& [k, v] : values)
    KILN_CHECK(current.count(k), name_, ": no hyper-parameter '", k, "'");
  KILN_CHECK(values.size() == current.size(), name_, ": set_hyper_parameters needs all ", current.size(),
             " hyper-parameters, got ", values.size());
  check_hyper_params(values);
  set_hyper_params(group, values);
}

double Optimizer::initial_lr(size_t group) const {
  (void)params(group);
  return initial_lr_[group];
}

void Optimizer::set_initial_lr(size_t group, double lr) {
  (void)params(group);
  KILN_CHECK(lr >= 0, name_, ": initial_lr must be >= 0, got ", lr);
  initial_lr_[group] = lr;
}

void Optimizer::step(const Tensor& found_inf) {
  if (!found_inf.defined() || found_inf.item() == 0.0) step();
}

const ParamState& Optimizer::state(size_t group, size_t index) const {
  ParamState& s = const_cast<Optimizer*>(this)->mutable_state(group, index);
  if (s.device_step.defined()) s.step = static_cast<int64_t>(s.device_step.item());  // Note [Device step counts]
  return s;
}

ParamState& Optimizer::mutable_state(size_t group, size_t index) {
  KILN_CHECK(index < params(group).size(), name_, ": group ", group, " has ", params_[group].size(),
             " parameters, no parameter ", index);
  return state_[group][index];
}

ParamState& Optimizer::state_for_update(size_t group, size_t index) {
  ParamState& s = mutable_state(group, index);
  const Device device = params_[group][index].device();
  for (auto& [key, buffer] : s.buffers)
    if (buffer.device() != device) buffer = buffer.to(device);
  if (s.device_step.defined() && s.device_step.device() != device) {
    s.step = static_cast<int64_t>(s.device_step.item());
    s.device_step = Tensor();
  }
  if (device.is_cuda() && !s.device_step.defined())
    s.device_step = full(Shape{}, static_cast<double>(s.step), TensorOptions(DType::i64).device(device));
  return s;
}

void Optimizer::add_params(std::vector<Tensor> params, bool sixteen_bit) {
  KILN_CHECK(!params.empty(), name_, ": a parameter group needs at least one parameter");
  std::set<const TensorImpl*> seen;
  for (const auto& group : params_)
    for (const Tensor& p : group) seen.insert(p.impl());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    KILN_CHECK(p.defined(), name_, ": parameter ", i, " of group ", params_.size(), " is an undefined tensor");
    const bool half = p.dtype() == DType::bf16 || p.dtype() == DType::f16;
    KILN_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64 || (sixteen_bit && half), name_, ": parameter ", i,
               " of group ", params_.size(), " has dtype ", p.dtype(), "; optimizers update f32 or f64 parameters",
               half ? " (16-bit parameters train through f32 master weights: a MixedPrecisionPolicy with param_dtype "
                      "bf16 or f16, TrainerOptions::mixed_precision)" : "");
    KILN_CHECK(p.is_leaf(), name_, ": parameter ", i, " of group ", params_.size(), " (shape ", p.shape(),
               ") is not a leaf tensor; optimize leaves (or their detach())");
    KILN_CHECK(seen.insert(p.impl()).second, name_, ": parameter ", i, " of group ", params_.size(),
               " (shape ", p.shape(), ") appears more than once among the parameter groups");
  }
  state_.emplace_back(params.size());
  params_.push_back(std::move(params));
  initial_lr_.push_back(std::numeric_limits<double>::quiet_NaN());
}

Tensor Optimizer::grad_for_update(size_t group, size_t index) const {
  const Tensor& p = params_[group][index];
  Tensor g = p.grad();
  if (!g.defined()) return g;
  KILN_CHECK(g.shape() == p.shape() && g.dtype() == p.dtype() && g.device() == p.device(), name_,
             ": the gradient of parameter ", index, " of group ", group, " is ", g.dtype(), g.shape(), " on ",
             g.device(), " but the parameter is ", p.dtype(), p.shape(), " on ", p.device());
  return g;
}

Tensor Optimizer::found_inf_on(const Tensor& found_inf, Device device) {
  if (!found_inf.defined()) return found_inf;
  KILN_CHECK(found_inf.numel() == 1, "Optimizer::step: found_inf must hold one number, got shape ",
             found_inf.shape());
  return found_inf.to(device).to(DType::f32);
}

bool Optimizer::HostSkip::operator()() {
  if (!found_inf_.defined()) return false;
  if (value_ < 0) value_ = found_inf_.item() != 0.0 ? 1 : 0;
  return value_ == 1;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const auto& group : params_) autograd::zero_grad(group, set_to_none);
}

std::vector<Tensor> Optimizer::step_gradients() const {
  std::vector<Tensor> grads;
  std::set<const TensorImpl*> seen;
  for (const auto& group : params_)
    for (const Tensor& p : group) {
      Tensor g = p.grad();
      if (g.defined() && seen.insert(g.impl()).second) grads.push_back(g);
    }
  return grads;
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  for (size_t g = 0; g < params_.size(); ++g) {
    out.emplace_back(group_key(g, "num_params"),
                     scalar_tensor(static_cast<double>(params_[g].size()), DType::i64));
    for (const auto& [k, v] : hyper_params(g)) out.emplace_back(group_key(g, k), scalar_tensor(v, DType::f64));
    if (!std::isnan(initial_lr_[g]))
      out.emplace_back(group_key(g, "initial_lr"), scalar_tensor(initial_lr_[g], DType::f64));
  }
  for (size_t g = 0; g < params_.size(); ++g) {
    // Only the buffers the current hyper-parameters use (a momentum switched off since leaves a
    // stale buffer that the update ignores).
    const std::vector<std::string> keys = state_keys(hyper_params(g));
    for (size_t i = 0; i < params_[g].size(); ++i) {
      const ParamState& s = state(g, i);  // the device's step count, if it has one
      if (s.step == 0) continue;
      out.emplace_back(state_key(g, i, "step"), scalar_tensor(static_cast<double>(s.step), DType::i64));
      for (const std::string& k : keys) {
        auto it = s.buffers.find(k);
        if (it != s.buffers.end()) out.emplace_back(state_key(g, i, k), it->second);
      }
    }
  }
  return out;
}

void Optimizer::validate_state_dict(const NamedTensors& dict) const {
  const std::string where = name_ + ".load_state_dict";
  std::map<std::string, const Tensor*> m;
  for (const auto& [k, t] : dict) {
    KILN_CHECK(m.emplace(k, &t).second, where, ": key '", k, "' appears twice");
  }
  std::set<std::string> used;
  auto find = [&](const std::string& key) -> const Tensor* {
    auto it = m.find(key);
    if (it == m.end()) return nullptr;
    used.insert(key);
    return it->second;
  };
  for (size_t g = 0; g < params_.size(); ++g) {
    const Tensor* n = find(group_key(g, "num_params"));
    KILN_CHECK(n, where, ": missing '", group_key(g, "num_params"), "' (this optimizer has ", params_.size(),
               " parameter groups)");
    double count = scalar_value(name_, group_key(g, "num_params"), *n);
    KILN_CHECK(count == static_cast<double>(params_[g].size()), where, ": group ", g, " holds ", count,
               " parameters in the dict but ", params_[g].size(), " in this optimizer");
    HyperParams hp;
    for (const auto& [k, unused] : hyper_params(g)) {
      const Tensor* t = find(group_key(g, k));
      KILN_CHECK(t, where, ": missing hyper-parameter '", group_key(g, k), "'");
      hp[k] = scalar_value(name_, group_key(g, k), *t);
    }
    check_hyper_params(hp);
    if (const Tensor* t = find(group_key(g, "initial_lr"))) scalar_value(name_, group_key(g, "initial_lr"), *t);
    const std::vector<std::string> keys = state_keys(hp);
    for (size_t i = 0; i < params_[g].size(); ++i) {
      const Tensor& p = params_[g][i];
      const Tensor* step = find(state_key(g, i, "step"));
      std::vector<const Tensor*> buffers;
      for (const std::string& k : keys) buffers.push_back(find(state_key(g, i, k)));
      if (!step) {
        for (size_t b = 0; b < keys.size(); ++b)
          KILN_CHECK(!buffers[b], where, ": '", state_key(g, i, keys[b]), "' is present but '",
                     state_key(g, i, "step"), "' is missing");
        continue;
      }
      double s = scalar_value(name_, state_key(g, i, "step"), *step);
      KILN_CHECK(s >= 1 && s == std::floor(s), where, ": '", state_key(g, i, "step"),
                 "' must be a positive integer, got ", s);
      for (size_t b = 0; b < keys.size(); ++b) {
        const std::string key = state_key(g, i, keys[b]);
        KILN_CHECK(buffers[b], where, ": missing '", key, "' (parameter ", i, " of group ", g, " has a step count)");
        const Tensor& t = *buffers[b];
        KILN_CHECK(t.defined() && t.shape() == p.shape() && t.dtype() == state_dtype(p), where, ": '", key, "' is ",
                   t.defined() ? t.dtype() : DType::f32, t.defined() ? t.shape() : Shape{},
                   " but the parameter's state is ", state_dtype(p), p.shape());
      }
    }
  }
  for (const auto& [k, t] : m)
    KILN_CHECK(used.count(k), where, ": unexpected key '", k, "' (not part of a ", name_, " with ",
               params_.size(), " parameter groups of sizes as built)");
}

void Optimizer::load_state_dict(const NamedTensors& dict) {
  validate_state_dict(dict);
  std::map<std::string, Tensor> m(dict.begin(), dict.end());
  NoGradGuard no_grad;
  for (size_t g = 0; g < params_.size(); ++g) {
    HyperParams hp = hyper_params(g);
    for (auto& [k, v] : hp) v = m.at(group_key(g, k)).item();
    set_hyper_params(g, hp);
    auto il = m.find(group_key(g, "initial_lr"));
    initial_lr_[g] = il == m.end() ? std::numeric_limits<double>::quiet_NaN() : il->second.item();
    const std::vector<std::string> keys = state_keys(hp);
    for (size_t i = 0; i < params_[g].size(); ++i) {
      ParamState fresh;
      auto step = m.find(state_key(g, i, "step"));
      if (step != m.end()) {
        fresh.step = static_cast<int64_t>(step->second.item());
        const Tensor& p = params_[g][i];
        for (const std::string& k : keys) {
          Tensor b = empty(p.shape(), TensorOptions(p.dtype()).device(p.device()));
          b.copy_(m.at(state_key(g, i, k)));
          fresh.buffers.emplace(k, b);
        }
      }
      state_[g][i] = std::move(fresh);
    }
  }
}

}  // namespace kiln::optim
