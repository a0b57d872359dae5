// GroupedOptimizer: the base of SGD and AdamW. It holds every parameter group's options (one typed
// struct per group, crossing state_dict() as HyperParams) and runs the step both share (Note
// [Optimizer step]), so that each optimizer holds only its options and its update math.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/profiler/profiler.h>
#include <kiln/optim/optimizer.h>

namespace kiln::optim {

namespace detail {

// The CUDA parameters of one group with one device and dtype, for one fused launch. At namespace
// scope, so that the explicit instantiation declarations in sgd.h and adamw.h (where CudaTensors
// is incomplete) do not instantiate it.
template <class CudaTensors>
struct CudaBatch {
  Device device;
  DType dtype;
  CudaTensors tensors;
  std::vector<std::pair<Tensor, Tensor>> write_back;  // (strided parameter, its contiguous working copy)
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

// Note [Optimizer step]
// step(found_inf) of SGD and AdamW walks the groups in order, under NoGradGuard. Every parameter
// with a gradient (grad_for_update) is updated where it lives:
// - on the CPU, unless the host reads found_inf as set (HostSkip: one read per step), by
//   update_on_cpu() with its state made ready (state_for_update), and then counted (++step);
// - on CUDA, it joins its group's batch for its device and dtype: its contiguous working copy (a
//   strided parameter is copied, and written back after the launch), its contiguous gradient and
//   its device step count; add_to_batch() adds the optimizer's buffers. Each batch is one fused
//   launch() at the end of the group, which reads found_inf on the device (Note [Device step
//   counts]). Where add_to_batch() changed a state in a way a skipped step must not leave behind,
//   the host reads found_inf after the launches and undo_skipped() undoes the change.
// `CudaTensors` is the launch list of core/cuda/kernels/optim_step.h (cuda::SGDTensors, cuda::AdamWTensors):
// only the optimizer's .cpp, which instantiates step(), needs its definition.
template <class Options, class CudaTensors>
class GroupedOptimizer : public Optimizer {
 public:
  using Group = ParamGroup<Options>;

  void add_param_group(Group group) {
    check_hyper_params(to_hyper_params(group.options));
    add_params(std::move(group.params));
    options_.push_back(std::move(group.options));
  }
  const Options& options(size_t group) const {
    (void)params(group);
    return options_[group];
  }
  // Checked like add_param_group's.
  void set_options(size_t group, const Options& options) {
    (void)params(group);
    check_hyper_params(to_hyper_params(options));
    options_[group] = options;
  }

  void step() override { step(Tensor()); }
  // CUDA parameters: one fused launch per group, device and dtype (Note [Optimizer step]).
  void step(const Tensor& found_inf) override;

 protected:
  explicit GroupedOptimizer(std::string name) : Optimizer(std::move(name)) {}

  // For the derived constructors (the checks call the derived class, so the base cannot).
  void add_param_groups(std::vector<Group> groups) {
    KILN_CHECK(!groups.empty(), name(), ": needs at least one parameter group");
    for (Group& g : groups) add_param_group(std::move(g));
  }

  // An optimizer's options as the hyper-parameters state_dict() carries, and back.
  virtual HyperParams to_hyper_params(const Options& options) const = 0;
  virtual Options from_hyper_params(const HyperParams& values) const = 0;

  // The math (Note [Optimizer step]). update_on_cpu: one update of `param`; `state.step` counts the
  // updates before it. add_to_batch: `param` already joined `batch` (params, grads and steps);
  // `maybe_updated` says whether it had a step count, on the host or on a device, before this step.
  // It returns true when undo_skipped(group, index) must run should the device skip this step.
  virtual void update_on_cpu(size_t group, size_t index, Tensor& param, const Tensor& grad, ParamState& state) = 0;
  virtual bool add_to_batch(size_t group, size_t index, const Tensor& param, ParamState& state, bool maybe_updated,
                            CudaTensors& batch) = 0;
  // `found_inf`: undefined, or a one-element f32 tensor on the batch's device (found_inf_on).
  virtual void launch(size_t group, const CudaTensors& batch, const Tensor& found_inf) = 0;
  virtual void undo_skipped(size_t group, size_t index) {}

  HyperParams hyper_params(size_t group) const final { return to_hyper_params(options(group)); }
  void set_hyper_params(size_t group, const HyperParams& values) final {
    options_[group] = from_hyper_params(values);
  }

 private:
  std::vector<Options> options_;  // parallel to the parameter groups
};

template <class Options, class CudaTensors>
void GroupedOptimizer<Options, CudaTensors>::step(const Tensor& found_inf) {
  profiler::Range range(profiler::Category::optimizer, [&] { return name() + ".step"; });
  NoGradGuard no_grad;
  HostSkip skip_on_host(found_inf);
  for (size_t g = 0; g < num_param_groups(); ++g) {
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
        if (add_to_batch(g, i, p, st, maybe_updated, b.tensors)) undo_if_skipped.push_back(i);
        continue;
      }
      if (skip_on_host()) continue;
      ParamState& st = state_for_update(g, i);
      update_on_cpu(g, i, p, grad, st);
      ++st.step;
    }
    for (auto& b : batches) {
      launch(g, b.tensors, found_inf_on(found_inf, b.device));
      for (auto& [p, work] : b.write_back) p.copy_(work);
    }
    if (!undo_if_skipped.empty() && skip_on_host())
      for (size_t i : undo_if_skipped) undo_skipped(g, i);
  }
}

}  // namespace kiln::optim
