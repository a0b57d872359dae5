// SGD: torch.optim.SGD (1.13, single-tensor path) step for step, written with kiln::ops in-place
// ops. At most one temporary the size of a parameter per update, and only when weight decay or
// Nesterov needs a d_p distinct from the gradient (torch allocates the same one). CUDA parameters
// go to the multi-tensor kernel (core/cuda/kernels/optim_step.h), which does the same per element.
#include <kiln/optim/sgd.h>

#include <algorithm>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/cuda/kernels/optim_step.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>

namespace kiln::optim {

namespace {

HyperParams to_hyper_params(const SGDOptions& o) {
  return {{"lr", o.lr()},
          {"momentum", o.momentum()},
          {"dampening", o.dampening()},
          {"nesterov", o.nesterov() ? 1.0 : 0.0},
          {"weight_decay", o.weight_decay()}};
}

SGDOptions from_hyper_params(const HyperParams& hp) {
  return SGDOptions(hp.at("lr"))
      .momentum(hp.at("momentum"))
      .dampening(hp.at("dampening"))
      .nesterov(hp.at("nesterov") != 0.0)
      .weight_decay(hp.at("weight_decay"));
}

// The CUDA parameters of one group with one device and dtype: one fused launch.
struct CudaBatch {
  Device device;
  DType dtype;
  cuda::SGDTensors tensors;
  std::vector<std::pair<Tensor, Tensor>> write_back;  // (strided parameter, its contiguous working copy)
};

CudaBatch& batch_for(std::vector<CudaBatch>& batches, const Tensor& p) {
  auto it = std::find_if(batches.begin(), batches.end(),
                         [&](const CudaBatch& b) { return b.device == p.device() && b.dtype == p.dtype(); });
  if (it != batches.end()) return *it;
  return batches.emplace_back(CudaBatch{p.device(), p.dtype(), {}, {}});
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : Optimizer("SGD") {
  add_param_group(Group{std::move(params), options});
}

SGD::SGD(std::vector<Group> groups) : Optimizer("SGD") {
  KILN_CHECK(!groups.empty(), "SGD: needs at least one parameter group");
  for (Group& g : groups) add_param_group(std::move(g));
}

void SGD::add_param_group(Group group) {
  check_hyper_params(to_hyper_params(group.options));
  add_params(std::move(group.params));
  options_.push_back(group.options);
}

const SGDOptions& SGD::options(size_t group) const {
  (void)params(group);
  return options_[group];
}

void SGD::set_options(size_t group, const SGDOptions& options) {
  (void)params(group);
  check_hyper_params(to_hyper_params(options));
  options_[group] = options;
}

HyperParams SGD::hyper_params(size_t group) const { return to_hyper_params(options(group)); }

void SGD::set_hyper_params(size_t group, const HyperParams& values) { options_[group] = from_hyper_params(values); }

std::vector<std::string> SGD::state_keys(const HyperParams& values) const {
  if (values.at("momentum") != 0.0) return {"momentum_buffer"};
  return {};
}

void SGD::check_hyper_params(const HyperParams& hp) const {
  KILN_CHECK(hp.at("lr") >= 0.0, "SGD: invalid learning rate ", hp.at("lr"), " (must be >= 0)");
  KILN_CHECK(hp.at("momentum") >= 0.0, "SGD: invalid momentum ", hp.at("momentum"), " (must be >= 0)");
  KILN_CHECK(hp.at("weight_decay") >= 0.0, "SGD: invalid weight_decay ", hp.at("weight_decay"), " (must be >= 0)");
  KILN_CHECK(hp.at("nesterov") == 0.0 || hp.at("nesterov") == 1.0, "SGD: nesterov must be 0 or 1, got ",
             hp.at("nesterov"));
  KILN_CHECK(hp.at("nesterov") == 0.0 || (hp.at("momentum") > 0.0 && hp.at("dampening") == 0.0),
             "SGD: Nesterov momentum requires a momentum > 0 and zero dampening, got momentum ", hp.at("momentum"),
             " and dampening ", hp.at("dampening"));
}

// torch.optim.SGD, for each parameter p with gradient g:
//   d_p = g + weight_decay * p                       (when weight_decay != 0)
//   buf = d_p on the first step, else buf = momentum * buf + (1 - dampening) * d_p
//   d_p = d_p + momentum * buf (nesterov)  or  d_p = buf       (when momentum != 0)
//   p  -= lr * d_p
void SGD::step() { step(Tensor()); }

void SGD::step(const Tensor& found_inf) {
  NoGradGuard no_grad;
  HostSkip skip_on_host(found_inf);
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const SGDOptions& o = options_[g];
    std::vector<CudaBatch> batches;
    // CUDA parameters whose momentum buffer is created now although they may have been updated
    // before (momentum switched on mid-run): Note [Fresh momentum buffers].
    std::vector<size_t> fresh_after_updates;
    for (size_t i = 0; i < params(g).size(); ++i) {
      Tensor grad = grad_for_update(g, i);
      if (!grad.defined()) continue;
      Tensor p = params(g)[i];
      if (p.device().is_cuda()) {
        const bool had_state = mutable_state(g, i).step > 0 || mutable_state(g, i).device_step.defined();
        ParamState& st = state_for_update(g, i);
        CudaBatch& b = batch_for(batches, p);
        Tensor work = p.is_contiguous() ? p : p.contiguous();  // a copy only for a strided parameter
        if (!work.is_same(p)) b.write_back.emplace_back(p, work);
        b.tensors.params.push_back(work);
        b.tensors.grads.push_back(grad.contiguous());
        b.tensors.steps.push_back(st.device_step);
        if (o.momentum() != 0.0) {
          auto it = st.buffers.find("momentum_buffer");
          const bool fresh = it == st.buffers.end();
          if (fresh) {
            it = st.buffers.emplace("momentum_buffer", zeros(p.shape(), TensorOptions(p.dtype()).device(p.device())))
                     .first;
            if (had_state && found_inf.defined()) fresh_after_updates.push_back(i);
          }
          b.tensors.momentum_buffers.push_back(it->second);
          b.tensors.fresh.push_back(fresh ? 1 : 0);
        }
        continue;
      }
      if (skip_on_host()) continue;
      ParamState& st = state_for_update(g, i);
      Tensor d_p = grad;
      bool owned = false;  // d_p is our temporary, not the caller's gradient
      if (o.weight_decay() != 0.0) {
        d_p = grad.clone();
        ops::add_(d_p, p, o.weight_decay());
        owned = true;
      }
      if (o.momentum() != 0.0) {
        auto it = st.buffers.find("momentum_buffer");
        if (it == st.buffers.end()) {
          // The first buffer is d_p itself (no dampening); share our temporary when nothing
          // else will modify it.
          Tensor buf = owned && !o.nesterov() ? d_p : d_p.clone();
          it = st.buffers.emplace("momentum_buffer", buf).first;
        } else {
          ops::mul_(it->second, o.momentum());
          ops::add_(it->second, d_p, 1.0 - o.dampening());
        }
        if (o.nesterov()) {
          if (!owned) d_p = grad.clone();
          ops::add_(d_p, it->second, o.momentum());
        } else {
          d_p = it->second;
        }
      }
      ops::add_(p, d_p, -o.lr());
      ++st.step;
    }
    if constexpr (cuda::kBuilt) {
      const cuda::SGDHyper h{o.lr(), o.momentum(), o.dampening(), o.weight_decay(), o.nesterov()};
      for (CudaBatch& b : batches) {
        cuda::sgd_step(b.tensors, h, found_inf_on(found_inf, b.device));
        for (auto& [p, work] : b.write_back) p.copy_(work);
      }
    }
    // Note [Fresh momentum buffers]
    // On the device a momentum buffer starts as d_p on the parameter's first real update (device
    // step count 1) or when the host created it for this step (`fresh`). A buffer created for a
    // parameter that may already have been updated, in a step the device may skip, would look
    // started at the next step; so in that rare case (momentum switched on mid-run, under a
    // GradScaler) the flag is read on the host and a skipped step leaves no buffer behind.
    if (!fresh_after_updates.empty() && skip_on_host())
      for (size_t i : fresh_after_updates) mutable_state(g, i).buffers.erase("momentum_buffer");
  }
}

}  // namespace kiln::optim
