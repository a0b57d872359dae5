// AdamW (decoupled weight decay, optional AMSGrad) with torch.optim.AdamW's exact update (see
// adamw.cpp). Parameters are taken as tensors, like torch.optim: no nn dependency.
#pragma once

#include <utility>

#include <kiln/optim/optimizer.h>

namespace kiln::optim {

// torch C++ style: AdamWOptions(1e-3).betas({0.9, 0.95}).weight_decay(0.1).
struct AdamWOptions {
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}

  AdamWOptions& lr(double v) { lr_ = v; return *this; }
  AdamWOptions& betas(std::pair<double, double> v) { betas_ = v; return *this; }
  AdamWOptions& eps(double v) { eps_ = v; return *this; }
  AdamWOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  AdamWOptions& amsgrad(bool v) { amsgrad_ = v; return *this; }
  double lr() const { return lr_; }
  std::pair<double, double> betas() const { return betas_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }
  bool amsgrad() const { return amsgrad_; }

 private:
  double lr_;
  std::pair<double, double> betas_{0.9, 0.999};
  double eps_ = 1e-8;
  double weight_decay_ = 1e-2;  // torch.optim.AdamW's default
  bool amsgrad_ = false;
};

class AdamW : public Optimizer {
 public:
  using Group = ParamGroup<AdamWOptions>;

  AdamW(std::vector<Tensor> params, AdamWOptions options);
  explicit AdamW(std::vector<Group> groups);

  void add_param_group(Group group);
  const AdamWOptions& options(size_t group) const;
  void set_options(size_t group, const AdamWOptions& options);

  void step() override;
  // CUDA parameters: one fused launch per group, device and dtype (core/cuda/kernels/optim_step.h).
  void step(const Tensor& found_inf) override;

 protected:
  HyperParams hyper_params(size_t group) const override;
  void set_hyper_params(size_t group, const HyperParams& values) override;
  std::vector<std::string> state_keys(const HyperParams& values) const override;
  void check_hyper_params(const HyperParams& values) const override;

 private:
  std::vector<AdamWOptions> options_;
};

}  // namespace kiln::optim
