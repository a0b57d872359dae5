// SGD with momentum, dampening, Nesterov and L2 weight decay, with torch.optim.SGD's exact
// update (see sgd.cpp). Parameters are taken as tensors, like torch.optim: no nn dependency.
#pragma once

#include <kiln/core/arg.h>
#include <kiln/optim/grouped_optimizer.h>

namespace kiln::optim {

/// torch C++ style: SGDOptions(0.1).momentum(0.9).nesterov(true).
struct SGDOptions {
  explicit SGDOptions(double lr = 1e-3) : lr_(lr) {}

  KILN_ARG(double, lr);
  KILN_ARG(double, momentum) = 0.0;
  KILN_ARG(double, dampening) = 0.0;
  KILN_ARG(bool, nesterov) = false;
  KILN_ARG(double, weight_decay) = 0.0;
};

/// SGD(params, SGDOptions(0.1)) for one group, SGD(std::vector<SGD::Group>) for several; the
/// update math is SGDRule, in sgd.cpp (Note [Optimizer rules]).
struct SGDRule;
using SGD = GroupedOptimizer<SGDOptions, SGDRule>;
extern template class GroupedOptimizer<SGDOptions, SGDRule>;

}  // namespace kiln::optim
