// SGD: torch.optim.SGD (1.13, single-tensor path) step for step, written with kiln::ops in-place
// ops. At most one temporary the size of a parameter per update, and only when weight decay or
// Nesterov needs a d_p distinct from the gradient (torch allocates the same one). CUDA parameters
// go to the multi-tensor kernel (core/cuda/kernels/optim_step.h), which does the same per element.
#include <kiln/optim/sgd.h>

#include <kiln/core/cuda/kernels/optim_step.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>

namespace kiln::optim {

template class GroupedOptimizer<SGDOptions, cuda::SGDTensors>;

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : GroupedOptimizer("SGD") {
  add_param_group(Group{std::move(params), options});
}

SGD::SGD(std::vector<Group> groups) : GroupedOptimizer("SGD") { add_param_groups(std::move(groups)); }

HyperParams SGD::to_hyper_params(const SGDOptions& o) const {
  return {{"lr", o.lr()},
          {"momentum", o.momentum()},
          {"dampening", o.dampening()},
          {"nesterov", o.nesterov() ? 1.0 : 0.0},
          {"weight_decay", o.weight_decay()}};
}

SGDOptions SGD::from_hyper_params(const HyperParams& hp) const {
  return SGDOptions(hp.at("lr"))
      .momentum(hp.at("momentum"))
      .dampening(hp.at("dampening"))
      .nesterov(hp.at("nesterov") != 0.0)
      .weight_decay(hp.at("weight_decay"));
}

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
void SGD::update_on_cpu(size_t g, size_t i, Tensor& p, const Tensor& grad, ParamState& st) {
  const SGDOptions& o = options(g);
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
}

// Note [Fresh momentum buffers]
// On the device a momentum buffer starts as d_p on the parameter's first real update (device
// step count 1) or when the host created it for this step (`fresh`). A buffer created for a
// parameter that may already have been updated, in a step the device may skip, would look
// started at the next step; so in that rare case (momentum switched on mid-run, under a
// GradScaler) the flag is read on the host and a skipped step leaves no buffer behind.
bool SGD::add_to_batch(size_t g, size_t i, const Tensor& p, ParamState& st, bool maybe_updated,
                       cuda::SGDTensors& batch) {
  if (options(g).momentum() == 0.0) return false;
  auto it = st.buffers.find("momentum_buffer");
  const bool fresh = it == st.buffers.end();
  if (fresh)
    it = st.buffers.emplace("momentum_buffer", zeros(p.shape(), TensorOptions(p.dtype()).device(p.device()))).first;
  batch.momentum_buffers.push_back(it->second);
  batch.fresh.push_back(fresh ? 1 : 0);
  return fresh && maybe_updated;
}

void SGD::launch(size_t g, const cuda::SGDTensors& batch, const Tensor& found_inf) {
  const SGDOptions& o = options(g);
  if constexpr (cuda::kBuilt)
    cuda::sgd_step(batch, {o.lr(), o.momentum(), o.dampening(), o.weight_decay(), o.nesterov()}, found_inf);
}

void SGD::undo_skipped(size_t g, size_t i) { mutable_state(g, i).buffers.erase("momentum_buffer"); }

}  // namespace kiln::optim
