// LayerNorm: parameters, ones/zeros init and the trailing-shape check around kiln::layer_norm.
// (BatchNorm2d, declared beside it in normalization.h, is in batch_norm.cpp.)
#include <kiln/nn/normalization.h>

#include <kiln/autograd/ops/layer_norm.h>
#include <kiln/core/factory.h>
#include <kiln/nn/init.h>

namespace kiln::nn {

LayerNorm::LayerNorm(const LayerNormOptions& opts) : options(opts) {
  KILN_CHECK(!options.normalized_shape_.empty(), "LayerNorm: normalized_shape must not be empty");
  for (int64_t d : options.normalized_shape_)
    KILN_CHECK(d > 0, "LayerNorm: normalized_shape ", options.normalized_shape_, " must be positive");
  if (options.elementwise_affine_) {
    weight = register_parameter("weight", empty(options.normalized_shape_));
    if (options.bias_) bias = register_parameter("bias", empty(options.normalized_shape_));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& x) {
  check_defined(x, "LayerNorm::forward");
  const Shape& ns = options.normalized_shape_;
  bool ok = x.dim() >= ns.ndim();
  for (int64_t i = 0; ok && i < ns.ndim(); ++i) ok = x.size(x.dim() - ns.ndim() + i) == ns[i];
  KILN_CHECK(ok, "LayerNorm(normalized_shape=", ns, "): expected input of shape (..., ", ns, "), got ", x.shape());
  return kiln::layer_norm(x, ns, weight, bias, options.eps_);
}

std::string LayerNorm::extra_repr() const {
  return detail::str_cat(options.normalized_shape_, ", eps=", options.eps_,
                         ", elementwise_affine=", options.elementwise_affine_ ? "true" : "false");
}

}  // namespace kiln::nn
