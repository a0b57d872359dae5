// SGD with momentum, dampening, Nesterov and L2 weight decay, with torch.optim.SGD's exact
// update (see sgd.cpp). Parameters are taken as tensors, like torch.optim: no nn dependency.
#pragma once

#include <kiln/optim/optimizer.h>

namespace kiln::optim {

// torch C++ style: SGDOptions(0.1).momentum(0.9).nesterov(true).
struct SGDOptions {
  explicit SGDOptions(double lr = 1e-3) : lr_(lr) {}

  SGDOptions& lr(double v) { lr_ = v; return *this; }
  SGDOptions& momentum(double v) { momentum_ = v; return *this; }
  SGDOptions& dampening(double v) { dampening_ = v; return *this; }
  SGDOptions& nesterov(bool v) { nesterov_ = v; return *this; }
  SGDOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  double lr() const { return lr_; }
  double momentum() const { return momentum_; }
  double dampening() const { return dampening_; }
  bool nesterov() const { return nesterov_; }
  double weight_decay() const { return weight_decay_; }

 private:
  double lr_;
  double momentum_ = 0.0;
  double dampening_ = 0.0;
  bool nesterov_ = false;
  double weight_decay_ = 0.0;
};

class SGD : public Optimizer {
 public:
  using Group = ParamGroup<SGDOptions>;

  // One group holding every parameter.
  SGD(std::vector<Tensor> params, SGDOptions options);
  // Several groups, each with its own options.
  explicit SGD(std::vector<Group> groups);

  void add_param_group(Group group);
  const SGDOptions& options(size_t group) const;
  void set_options(size_t group, const SGDOptions& options);  // checked like the constructor's

  void step() override;
  // CUDA parameters: one fused launch per group, device and dtype (core/cuda/kernels/optim_step.h).
  void step(const Tensor& found_inf) override;

 protected:
  HyperParams hyper_params(size_t group) const override;
  void set_hyper_params(size_t group, const HyperParams& values) override;
  std::vector<std::string> state_keys(const HyperParams& values) const override;
  void check_hyper_params(const HyperParams& values) const override;

 private:
  std::vector<SGDOptions> options_;  // parallel to the parameter groups
};

}  // namespace kiln::optim
