// GroupedOptimizer: the base of SGD and AdamW. It holds every parameter group's options (one typed
// struct per group, crossing state_dict() as HyperParams), checks them, and runs the step both share
// (Note [Optimizer step]): the per-group walk and the CUDA multi-tensor batches. What differs, an
// optimizer's Rule, is its math alone (Note [Optimizer rules]).
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/factory.h>
#include <kiln/core/profiler/profiler.h>
#include <kiln/cuda.h>
#include <kiln/optim/optimizer.h>

namespace kiln::optim {

/// The values a hyper-parameter may take (bools are 0 or 1 whatever their range says).
enum class HyperRange {
  any,
  non_negative,   ///< >= 0
  unit_interval,  ///< in [0, 1)
};

// Note [Optimizer rules]
// An optimizer built on GroupedOptimizer<Options, Rule> writes only its Rule, a struct of static
// members defined in its .cpp (which instantiates the base, so the header needs no definition):
//   kName                        "SGD", for messages
//   CudaTensors                  its launch list in core/cuda/kernels/optim_step.h
//   fields(options, f)           calls f(name, field, HyperRange) for every option: the one table
//                                that converts options to and from HyperParams and checks ranges
//   check(hp)                    checks across fields, beyond the ranges (may be empty)
//   state_keys(hp)               the buffers a parameter's state holds under `hp`
//   update_on_cpu(o, p, grad, state, group, index)
//                                one update of `p`; `state.step` counts the updates before it
//   add_to_batch(o, p, state, maybe_updated, batch, group, index)
//                                `p` already joined `batch` (params, grads and steps): add the
//                                optimizer's buffers; `maybe_updated` says whether it had a step
//                                count, on the host or on a device, before this step. Returns true
//                                when undo_skipped(state) must run should the device skip the step.
//   launch(o, batch, found_inf, lr_device)
//                                the fused kernel over one batch; only a CUDA build calls it;
//                                lr_device: undefined, or the lr to read on the device (Note
//                                [Learning rate on the device], optimizer.h)
//   undo_skipped(state)          optional (an optimizer whose add_to_batch never returns true)
// `o` is the group's options; `group` and `index` are for messages.

namespace detail {

/// The CUDA parameters of one group with one device and dtype, for one fused launch. At namespace
/// scope, so that the explicit instantiation declarations in sgd.h and adamw.h (where CudaTensors
/// is incomplete) do not instantiate it.
template <class CudaTensors>
struct CudaBatch {
  Device device;
  DType dtype;
  CudaTensors tensors;
  std::vector<std::pair<Tensor, Tensor>> write_back;  ///< (strided parameter, its contiguous working copy)
};

template <class CudaTensors>
CudaBatch<CudaTensors>& batch_for(std::vector<CudaBatch<CudaTensors>>& batches, const Tensor& p) {
  auto it = std::find_if(batches.begin(), batches.end(), [&](const CudaBatch<CudaTensors>& b) {
    return b.device == p.device() && b.dtype == p.dtype();
  });
  if (it != batches.end()) return *it;
  return batches.emplace_back(CudaBatch<CudaTensors>{p.device(), p.dtype(), {}, {}});
}

}  // namespace detail

/// Note [Optimizer step]
/// step(found_inf) of SGD and AdamW walks the groups in order, under NoGradGuard. Every parameter
/// with a gradient (grad_for_update) is updated where it lives:
/// - on the CPU, unless the host reads found_inf as set (HostSkip: one read per step), by
///   Rule::update_on_cpu() with its state made ready (state_for_update), and then counted (++step);
/// - on CUDA, it joins its group's batch for its device and dtype: its contiguous working copy (a
///   strided parameter is copied, and written back after the launch), its contiguous gradient and
///   its device step count; Rule::add_to_batch() adds the optimizer's buffers. Each batch is one
///   fused Rule::launch() at the end of the group, which reads found_inf on the device (Note [Device
///   step counts]). Where add_to_batch() changed a state in a way a skipped step must not leave
///   behind, the host reads found_inf after the launches and Rule::undo_skipped() undoes the change.
template <class Options, class Rule>
class GroupedOptimizer : public Optimizer {
 public:
  using Group = ParamGroup<Options>;

  /// One group holding every parameter.
  GroupedOptimizer(std::vector<Tensor> params, Options options);
  /// Several groups, each with its own options.
  explicit GroupedOptimizer(std::vector<Group> groups);

  void add_param_group(Group group);
  const Options& options(size_t group) const {
    (void)params(group);
    return options_[group];
  }
  /// Checked like add_param_group's.
  void set_options(size_t group, const Options& options);

  void step() override { step(Tensor()); }
  /// CUDA parameters: one fused launch per group, device and dtype (Note [Optimizer step]).
  void step(const Tensor& found_inf) override;
  void refresh_device_lr() override;  ///< Note [Learning rate on the device]

 protected:
  HyperParams hyper_params(size_t group) const final;
  void set_hyper_params(size_t group, const HyperParams& values) final;
  std::vector<std::string> state_keys(const HyperParams& values) const final;
  void check_hyper_params(const HyperParams& values) const final;

 private:
  static HyperParams to_hyper_params(const Options& options);

  std::vector<Options> options_;  ///< parallel to the parameter groups
  std::map<std::pair<size_t, int>, Tensor> device_lr_;  ///< (group, CUDA device) -> 0-dim f64 lr
};

// ---- definitions, instantiated by each optimizer's .cpp (where its Rule is complete) ----

template <class Options, class Rule>
GroupedOptimizer<Options, Rule>::GroupedOptimizer(std::vector<Tensor> params, Options options)
    : Optimizer(Rule::kName) {
  add_param_group(Group{std::move(params), std::move(options)});
}

template <class Options, class Rule>
GroupedOptimizer<Options, Rule>::GroupedOptimizer(std::vector<Group> groups) : Optimizer(Rule::kName) {
  KILN_CHECK(!groups.empty(), name(), ": needs at least one parameter group");
  for (Group& g : groups) add_param_group(std::move(g));
}

template <class Options, class Rule>
void GroupedOptimizer<Options, Rule>::add_param_group(Group group) {
  check_hyper_params(to_hyper_params(group.options));
  add_params(std::move(group.params));
  options_.push_back(std::move(group.options));
}

template <class Options, class Rule>
void GroupedOptimizer<Options, Rule>::set_options(size_t group, const Options& options) {
  (void)params(group);
  check_hyper_params(to_hyper_params(options));
  options_[group] = options;
}

template <class Options, class Rule>
HyperParams GroupedOptimizer<Options, Rule>::to_hyper_params(const Options& options) {
  HyperParams hp;
  Rule::fields(options, [&](const char* key, const auto& field, HyperRange) { hp[key] = static_cast<double>(field); });
  return hp;
}

template <class Options, class Rule>
HyperParams GroupedOptimizer<Options, Rule>::hyper_params(size_t group) const {
  return to_hyper_params(options(group));
}

template <class Options, class Rule>
void GroupedOptimizer<Options, Rule>::set_hyper_params(size_t group, const HyperParams& values) {
  Options o = options(group);
  Rule::fields(o, [&](const char* key, auto& field, HyperRange) {
    field = static_cast<std::remove_reference_t<decltype(field)>>(values.at(key));  // a bool: != 0
  });
  options_[group] = o;
}

template <class Options, class Rule>
std::vector<std::string> GroupedOptimizer<Options, Rule>::state_keys(const HyperParams& values) const {
  return Rule::state_keys(values);
}

template <class Options, class Rule>
void GroupedOptimizer<Options, Rule>::check_hyper_params(const HyperParams& hp) const {
  Rule::fields(Options(), [&](const char* key, const auto& field, HyperRange range) {
    const double v = hp.at(key);
    const std::string what = std::string(key) == "lr" ? "learning rate" : key;
    if constexpr (std::is_same_v<std::decay_t<decltype(field)>, bool>)
      KILN_CHECK(v == 0.0 || v == 1.0, name(), ": ", key, " must be 0 or 1, got ", v);
    else if (range == HyperRange::non_negative)
      KILN_CHECK(v >= 0.0, name(), ": invalid ", what, " ", v, " (must be >= 0)");
    else if (range == HyperRange::unit_interval)
      KILN_CHECK(v >= 0.0 && v < 1.0, name(), ": invalid ", what, " ", v, " (must be in [0, 1))");
  });
  Rule::check(hp);
}

template <class Options, class Rule>
void GroupedOptimizer<Options, Rule>::refresh_device_lr() {
  KILN_CHECK(!cuda::is_capturing(), name(), "::refresh_device_lr: called while capturing a CUDA graph; call it "
             "before the capture and before each replay");
  NoGradGuard no_grad;
  for (size_t g = 0; g < num_param_groups(); ++g)
    for (const Tensor& p : params(g)) {
      if (!p.device().is_cuda()) continue;
      Tensor& lr = device_lr_[{g, p.device().index}];
      if (!lr.defined()) lr = empty(Shape{}, DType::f64, p.device());
      lr.fill_(options(g).lr());
    }
}

template <class Options, class Rule>
void GroupedOptimizer<Options, Rule>::step(const Tensor& found_inf) {
  using CudaTensors = typename Rule::CudaTensors;
  profiler::Range range(profiler::Category::optimizer, [&] { return name() + ".step"; });
  NoGradGuard no_grad;
  HostSkip skip_on_host(found_inf);
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const Options& o = options(g);
    std::vector<detail::CudaBatch<CudaTensors>> batches;
    std::vector<size_t> undo_if_skipped;  // CUDA parameters of this group
    for (size_t i = 0; i < params(g).size(); ++i) {
      Tensor grad = grad_for_update(g, i);
      if (!grad.defined()) continue;
      Tensor p = params(g)[i];
      if (p.device().is_cuda()) {
        const bool maybe_updated = mutable_state(g, i).step > 0 || mutable_state(g, i).device_step.defined();
        ParamState& st = state_for_update(g, i);
        auto& b = detail::batch_for(batches, p);
        Tensor work = p.is_contiguous() ? p : p.contiguous();  // a copy only for a strided parameter
        if (!work.is_same(p)) b.write_back.emplace_back(p, work);
        b.tensors.params.push_back(work);
        b.tensors.grads.push_back(grad.contiguous());
        b.tensors.steps.push_back(st.device_step);
        if (Rule::add_to_batch(o, p, st, maybe_updated, b.tensors, g, i)) undo_if_skipped.push_back(i);
        continue;
      }
      if (skip_on_host()) continue;
      ParamState& st = state_for_update(g, i);
      Rule::update_on_cpu(o, p, grad, st, g, i);
      ++st.step;
    }
    for (auto& b : batches) {
      if constexpr (cuda::kBuilt) {
        // A device span, so a profile attributes the fused kernels' time (Note [Device spans]).
        profiler::DeviceRange span("fused_optimizer_step", profiler::Category::optimizer, b.device.index);
        Tensor lr_device;  // Note [Learning rate on the device]
        if (cuda::is_capturing()) {
          auto it = device_lr_.find({g, b.device.index});
          KILN_CHECK(it != device_lr_.end(), name(), "::step: capturing a CUDA graph, but group ", g,
                     " has no learning rate on ", b.device, "; call refresh_device_lr() before the capture");
          lr_device = it->second;
        }
        Rule::launch(o, b.tensors, found_inf_on(found_inf, b.device), lr_device);
      }
      for (auto& [p, work] : b.write_back) p.copy_(work);
    }
    if constexpr (requires(ParamState& s) { Rule::undo_skipped(s); })
      if (!undo_if_skipped.empty() && skip_on_host())
        for (size_t i : undo_if_skipped) Rule::undo_skipped(mutable_state(g, i));
  }
}

}  // namespace kiln::optim
