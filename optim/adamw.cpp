// AdamW: torch.optim.AdamW (1.13, single-tensor path) in one fused pass per parameter.
// kiln::ops has no addcmul_/addcdiv_/sqrt_, and composing the update from out-of-place ops would
// allocate three parameter-sized temporaries per step; the CPU kernel (core/cpu/optim_step.cpp,
// through ops::adamw_update_cpu) allocates none and performs torch's operations in torch's order,
// each rounded to the parameter's dtype. CUDA parameters go to the multi-tensor kernel
// (core/cuda/kernels/optim_step.h), which does the same per element.
#include <kiln/optim/adamw.h>

#include <cmath>

#include <kiln/core/cuda/kernels/optim_step.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/optim_step.h>

namespace kiln::optim {

namespace {

// A parameter's first state: zeros shaped, typed and placed like it.
void start_state(ParamState& st, const Tensor& p, bool amsgrad) {
  auto fresh = [&] { return zeros(p.shape(), TensorOptions(p.dtype()).device(p.device())); };
  st.buffers["exp_avg"] = fresh();
  st.buffers["exp_avg_sq"] = fresh();
  if (amsgrad) st.buffers["max_exp_avg_sq"] = fresh();
}

}  // namespace

struct AdamWRule {
  static constexpr const char* kName = "AdamW";
  template <class O, class F>
  static void fields(O&& o, F&& f) {
    f("lr", o.lr_, HyperRange::non_negative);
    f("beta1", o.betas_.first, HyperRange::unit_interval);
    f("beta2", o.betas_.second, HyperRange::unit_interval);
    f("eps", o.eps_, HyperRange::non_negative);
    f("weight_decay", o.weight_decay_, HyperRange::non_negative);
    f("amsgrad", o.amsgrad_, HyperRange::any);
  }

  static void check(const HyperParams&) {}  // the ranges say it all

  static std::vector<std::string> state_keys(const HyperParams& values) {
    if (values.at("amsgrad") != 0.0) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    return {"exp_avg", "exp_avg_sq"};
  }

  // torch.optim.AdamW, for each parameter p with gradient g, at step t (1-based):
  //   p *= 1 - lr * weight_decay
  //   m  = beta1 * m + (1 - beta1) * g            v = beta2 * v + (1 - beta2) * g * g
  //   vmax = max(vmax, v) and v := vmax           (amsgrad)
  //   denom = sqrt(v) / sqrt(1 - beta2^t) + eps   (eps outside the square root)
  //   p -= lr / (1 - beta1^t) * m / denom
  static void update_on_cpu(const AdamWOptions& o, Tensor& p, const Tensor& grad, ParamState& st, size_t g,
                            size_t i) {
    // Plain variables, not a structured binding (clang < 16 refuses to capture those in lambdas).
    const double beta1 = o.betas().first, beta2 = o.betas().second;
    if (st.step == 0) start_state(st, p, o.amsgrad());
    KILN_CHECK(!o.amsgrad() || st.buffers.count("max_exp_avg_sq"), "AdamW: parameter ", i, " of group ", g,
               " has state from ", st.step, " steps without amsgrad; amsgrad cannot be switched on mid-run");
    const double t = static_cast<double>(st.step + 1);
    const double bias_correction1 = 1.0 - std::pow(beta1, t);
    const double bias_correction2 = 1.0 - std::pow(beta2, t);
    Tensor work = p.is_contiguous() ? p : p.contiguous();  // a copy only for a strided parameter
    Tensor g_c = grad.contiguous();
    const ops::AdamWCoeffs c{1.0 - o.lr() * o.weight_decay(), beta1, 1.0 - beta1, beta2, 1.0 - beta2,
                             std::sqrt(bias_correction2), o.eps(), -(o.lr() / bias_correction1)};
    ops::adamw_update_cpu(work, g_c, st.buffers.at("exp_avg"), st.buffers.at("exp_avg_sq"),
                          o.amsgrad() ? st.buffers.at("max_exp_avg_sq") : Tensor(), c);
    if (!work.is_same(p)) p.copy_(work);
  }

  // ---- CUDA: the parameter's buffers join the batch; one fused launch per batch ----
  using CudaTensors = cuda::AdamWTensors;

  // Zero buffers are what a skipped first step leaves, so nothing is undone (no undo_skipped).
  static bool add_to_batch(const AdamWOptions& o, const Tensor& p, ParamState& st, bool, CudaTensors& batch,
                           size_t g, size_t i) {
    if (!st.buffers.count("exp_avg")) start_state(st, p, o.amsgrad());  // no update yet (or only skipped ones)
    KILN_CHECK(!o.amsgrad() || st.buffers.count("max_exp_avg_sq"), "AdamW: parameter ", i, " of group ", g,
               " has state from steps without amsgrad; amsgrad cannot be switched on mid-run");
    batch.exp_avgs.push_back(st.buffers.at("exp_avg"));
    batch.exp_avg_sqs.push_back(st.buffers.at("exp_avg_sq"));
    if (o.amsgrad()) batch.max_exp_avg_sqs.push_back(st.buffers.at("max_exp_avg_sq"));
    return false;
  }

  static void launch(const AdamWOptions& o, const CudaTensors& batch, const Tensor& found_inf, const Tensor& lr_device) {
    cuda::adamw_step(batch, {o.lr(), o.betas().first, o.betas().second, o.eps(), o.weight_decay(), o.amsgrad()},
                     found_inf, lr_device);
  }
};

template class GroupedOptimizer<AdamWOptions, AdamWRule>;

}  // namespace kiln::optim
