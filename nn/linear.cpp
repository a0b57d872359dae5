// Linear layer: parameters, torch's default init, and the input-shape check.
#include <kiln/nn/linear.h>

#include <cmath>

#include <kiln/autograd/ops/matmul.h>
#include <kiln/core/factory.h>
#include <kiln/nn/init.h>

namespace kiln::nn {

Linear::Linear(const LinearOptions& opts) : options(opts) {
  KILN_CHECK_VALUE(options.in_features_ > 0 && options.out_features_ > 0, "Linear: in_features (", options.in_features_,
                   ") and out_features (", options.out_features_, ") must be positive");
  weight = register_parameter("weight", empty({options.out_features_, options.in_features_}));
  if (options.bias_) bias = register_parameter("bias", empty({options.out_features_}));
  reset_parameters(generator_or_default(options.generator_));
}

void Linear::reset_parameters(Generator& gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), init::FanMode::fan_in, init::Nonlinearity::leaky_relu, gen);
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(double(options.in_features_));
    init::uniform_(bias, -bound, bound, gen);
  }
}

Tensor Linear::forward(const Tensor& x) {
  check_defined(x, "Linear::forward");
  KILN_CHECK_VALUE(x.dim() >= 1 && x.size(-1) == options.in_features_, "Linear(in_features=", options.in_features_,
                   "): expected input of shape (..., ", options.in_features_, "), got ", x.shape());
  return kiln::linear(x, weight, bias);
}

std::string Linear::extra_repr() const {
  return detail::str_cat("in_features=", options.in_features_, ", out_features=", options.out_features_,
                         ", bias=", options.bias_ ? "true" : "false");
}

}  // namespace kiln::nn
