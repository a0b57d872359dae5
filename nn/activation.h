// Activation modules over the differentiable elementwise ops: GELU (exact or tanh
// approximation) and ReLU.
#pragma once

#include <kiln/core/arg.h>
#include <kiln/autograd/ops/elementwise.h>
#include <kiln/nn/module.h>

namespace kiln::nn {

/// Options of GELU: the exact erf form or the tanh approximation.
struct GELUOptions {
  KILN_ARG(GeluApproximate, approximate) = GeluApproximate::none;
};

/// Applies gelu element-wise (torch.nn.GELU).
class GELU : public Module {
 public:
  explicit GELU(const GELUOptions& opts = {}) : options(opts) {}
  Tensor forward(const Tensor& x) { return kiln::gelu(x, options.approximate_); }
  std::string name() const override { return "GELU"; }
  std::string extra_repr() const override {
    return options.approximate_ == GeluApproximate::tanh ? "approximate='tanh'" : "approximate='none'";
  }

  GELUOptions options;
};

/// Applies relu element-wise (torch.nn.ReLU).
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) { return kiln::relu(x); }
  std::string name() const override { return "ReLU"; }
};

}  // namespace kiln::nn
