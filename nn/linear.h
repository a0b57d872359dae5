// Linear: y = x W^T + b over the last dim, with torch's parameter names and default init
// (weight kaiming_uniform(a=sqrt(5)), bias U(-1/sqrt(in), 1/sqrt(in))).
#pragma once

#include <cstdint>

#include <kiln/core/arg.h>
#include <kiln/core/generator.h>
#include <kiln/nn/module.h>

namespace kiln::nn {

/// Options of Linear: in and out features, bias, and the init generator.
struct LinearOptions {
  int64_t in_features_, out_features_;
  KILN_ARG(bool, bias) = true;
  Generator* generator_ = nullptr;  ///< init draws; null: the default generator

  LinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}
  LinearOptions& generator(Generator& g) { generator_ = &g; return *this; }
};

/// y = x W^T + b (torch.nn.Linear), weights initialized as torch does.
class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& options);
  Linear(int64_t in_features, int64_t out_features) : Linear(LinearOptions(in_features, out_features)) {}

  /// x (..., in_features) -> (..., out_features).
  Tensor forward(const Tensor& x);
  /// Redraws weight and bias as the constructor did.
  void reset_parameters(Generator& gen);

  std::string name() const override { return "Linear"; }
  std::string extra_repr() const override;

  LinearOptions options;
  Tensor weight;  ///< (out_features, in_features)
  Tensor bias;    ///< (out_features), undefined without bias
};

}  // namespace kiln::nn
