// SGD with momentum, dampening, Nesterov and L2 weight decay, with torch.optim.SGD's exact
// update (see sgd.cpp). Parameters are taken as tensors, like torch.optim: no nn dependency.
#pragma once

#include <kiln/core/arg.h>
#include <kiln/optim/grouped_optimizer.h>

namespace kiln::cuda {
struct SGDTensors;  // core/cuda/kernels/optim_step.h
}

namespace kiln::optim {

// torch C++ style: SGDOptions(0.1).momentum(0.9).nesterov(true).
struct SGDOptions {
  explicit SGDOptions(double lr = 1e-3) : lr_(lr) {}

  KILN_ARG(double, lr);
  KILN_ARG(double, momentum) = 0.0;
  KILN_ARG(double, dampening) = 0.0;
  KILN_ARG(bool, nesterov) = false;
  KILN_ARG(double, weight_decay) = 0.0;
};

// Instantiated once, in sgd.cpp, where cuda::SGDTensors is defined.
extern template class GroupedOptimizer<SGDOptions, cuda::SGDTensors>;

class SGD : public GroupedOptimizer<SGDOptions, cuda::SGDTensors> {
 public:
  // One group holding every parameter.
  SGD(std::vector<Tensor> params, SGDOptions options);
  // Several groups, each with its own options.
  explicit SGD(std::vector<Group> groups);

 protected:
  std::vector<std::string> state_keys(const HyperParams& values) const override;
  void check_hyper_params(const HyperParams& values) const override;
  HyperParams to_hyper_params(const SGDOptions& options) const override;
  SGDOptions from_hyper_params(const HyperParams& values) const override;

  void update_on_cpu(size_t group, size_t index, Tensor& param, const Tensor& grad, ParamState& state) override;
  bool add_to_batch(size_t group, size_t index, const Tensor& param, ParamState& state, bool maybe_updated,
                    cuda::SGDTensors& batch) override;
  void launch(size_t group, const cuda::SGDTensors& batch, const Tensor& found_inf) override;
  void undo_skipped(size_t group, size_t index) override;
};

}  // namespace kiln::optim
