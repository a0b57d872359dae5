// AdamW (decoupled weight decay, optional AMSGrad) with torch.optim.AdamW's exact update (see
// adamw.cpp). Parameters are taken as tensors, like torch.optim: no nn dependency.
#pragma once

#include <utility>

#include <kiln/core/arg.h>
#include <kiln/optim/grouped_optimizer.h>

namespace kiln::optim {

/// torch C++ style: AdamWOptions(1e-3).betas({0.9, 0.95}).weight_decay(0.1).
struct AdamWOptions {
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}

  using Betas = std::pair<double, double>;

  KILN_ARG(double, lr);
  KILN_ARG(Betas, betas){0.9, 0.999};
  KILN_ARG(double, eps) = 1e-8;
  KILN_ARG(double, weight_decay) = 1e-2;  ///< torch.optim.AdamW's default
  KILN_ARG(bool, amsgrad) = false;
};

/// The optimizer over parameter groups of AdamWOptions (GroupedOptimizer); its math, AdamWRule, is
/// defined and instantiated in adamw.cpp.
struct AdamWRule;
extern template class GroupedOptimizer<AdamWOptions, AdamWRule>;
using AdamW = GroupedOptimizer<AdamWOptions, AdamWRule>;

}  // namespace kiln::optim
