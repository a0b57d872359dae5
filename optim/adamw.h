// AdamW (decoupled weight decay, optional AMSGrad) with torch.optim.AdamW's exact update (see
// adamw.cpp). Parameters are taken as tensors, like torch.optim: no nn dependency.
#pragma once

#include <utility>

#include <kiln/core/arg.h>
#include <kiln/optim/grouped_optimizer.h>

namespace kiln::cuda {
struct AdamWTensors;  // core/cuda/kernels/optim_step.h
}

namespace kiln::optim {

// torch C++ style: AdamWOptions(1e-3).betas({0.9, 0.95}).weight_decay(0.1).
struct AdamWOptions {
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}

  using Betas = std::pair<double, double>;

  KILN_ARG(double, lr);
  KILN_ARG(Betas, betas){0.9, 0.999};
  KILN_ARG(double, eps) = 1e-8;
  KILN_ARG(double, weight_decay) = 1e-2;  // torch.optim.AdamW's default
  KILN_ARG(bool, amsgrad) = false;
};

// Instantiated once, in adamw.cpp, where cuda::AdamWTensors is defined.
extern template class GroupedOptimizer<AdamWOptions, cuda::AdamWTensors>;

class AdamW : public GroupedOptimizer<AdamWOptions, cuda::AdamWTensors> {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options);
  explicit AdamW(std::vector<Group> groups);

 protected:
  std::vector<std::string> state_keys(const HyperParams& values) const override;
  void check_hyper_params(const HyperParams& values) const override;
  HyperParams to_hyper_params(const AdamWOptions& options) const override;
  AdamWOptions from_hyper_params(const HyperParams& values) const override;

  void update_on_cpu(size_t group, size_t index, Tensor& param, const Tensor& grad, ParamState& state) override;
  bool add_to_batch(size_t group, size_t index, const Tensor& param, ParamState& state, bool maybe_updated,
                    cuda::AdamWTensors& batch) override;
  void launch(size_t group, const cuda::AdamWTensors& batch, const Tensor& found_inf) override;
};

}  // namespace kiln::optim
