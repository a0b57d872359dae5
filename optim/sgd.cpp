// SGD: torch.optim.SGD (1.13, single-tensor path) step for step, written with kiln::ops in-place
// ops. At most one temporary the size of a parameter per update, and only when weight decay or
// Nesterov needs a d_p distinct from the gradient (torch allocates the same one). CUDA parameters
// go to the multi-tensor kernel (core/cuda/kernels/optim_step.h), which does the same per element.
#include <kiln/optim/sgd.h>

#include <kiln/core/cuda/kernels/optim_step.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>

namespace kiln::optim {

struct SGDRule {
  static constexpr const char* kName = "SGD";
  template <class O, class F>
  static void fields(O&& o, F&& f) {
    f("lr", o.lr_, HyperRange::non_negative);
    f("momentum", o.momentum_, HyperRange::non_negative);
    f("dampening", o.dampening_, HyperRange::any);
    f("nesterov", o.nesterov_, HyperRange::any);
    f("weight_decay", o.weight_decay_, HyperRange::non_negative);
  }

  static void check(const HyperParams& hp) {
    KILN_CHECK(hp.at("nesterov") == 0.0 || (hp.at("momentum") > 0.0 && hp.at("dampening") == 0.0),
               "SGD: Nesterov momentum requires a momentum > 0 and zero dampening, got momentum ", hp.at("momentum"),
               " and dampening ", hp.at("dampening"));
  }

  static std::vector<std::string> state_keys(const HyperParams& values) {
    if (values.at("momentum") != 0.0) return {"momentum_buffer"};
    return {};
  }

  // torch.optim.SGD, for each parameter p with gradient g:
  //   d_p = g + weight_decay * p                       (when weight_decay != 0)
  //   buf = d_p on the first step, else buf = momentum * buf + (1 - dampening) * d_p
  //   d_p = d_p + momentum * buf (nesterov)  or  d_p = buf       (when momentum != 0)
  //   p  -= lr * d_p
  static void update_on_cpu(const SGDOptions& o, Tensor& p, const Tensor& grad, ParamState& st, size_t, size_t) {
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

  // ---- CUDA: the parameter's buffers join the batch; one fused launch per batch ----
  using CudaTensors = cuda::SGDTensors;

  // Note [Fresh momentum buffers]
  // On the device a momentum buffer starts as d_p on the parameter's first real update (device
  // step count 1) or when the host created it for this step (`fresh`). A buffer created for a
  // parameter that may already have been updated, in a step the device may skip, would look
  // started at the next step; so in that rare case (momentum switched on mid-run, under a
  // GradScaler) the flag is read on the host and a skipped step leaves no buffer behind.
  static bool add_to_batch(const SGDOptions& o, const Tensor& p, ParamState& st, bool maybe_updated,
                           CudaTensors& batch, size_t, size_t) {
    if (o.momentum() == 0.0) return false;
    auto it = st.buffers.find("momentum_buffer");
    const bool fresh = it == st.buffers.end();
    if (fresh)
      it = st.buffers.emplace("momentum_buffer", zeros(p.shape(), TensorOptions(p.dtype()).device(p.device()))).first;
    batch.momentum_buffers.push_back(it->second);
    batch.fresh.push_back(fresh ? 1 : 0);
    return fresh && maybe_updated;
  }

  static void launch(const SGDOptions& o, const CudaTensors& batch, const Tensor& found_inf, const Tensor& lr_device) {
    cuda::sgd_step(batch, {o.lr(), o.momentum(), o.dampening(), o.weight_decay(), o.nesterov()}, found_inf,
                   lr_device);
  }

  static void undo_skipped(ParamState& st) { st.buffers.erase("momentum_buffer"); }
};

template class GroupedOptimizer<SGDOptions, SGDRule>;

}  // namespace kiln::optim
