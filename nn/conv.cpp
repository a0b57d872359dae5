// Conv2d layer: option validation, parameters, default init and the input-shape check.
#include <kiln/nn/conv.h>

#include <cmath>

#include <kiln/core/factory.h>
#include <kiln/nn/init.h>

namespace kiln::nn {

Conv2d::Conv2d(const Conv2dOptions& opts) : options(opts) {
  const auto& o = options;
  KILN_CHECK_VALUE(o.in_channels_ > 0 && o.out_channels_ > 0 && o.groups_ > 0, "Conv2d: in_channels (", o.in_channels_,
                   "), out_channels (", o.out_channels_, ") and groups (", o.groups_, ") must be positive");
  KILN_CHECK_VALUE(o.in_channels_ % o.groups_ == 0 && o.out_channels_ % o.groups_ == 0, "Conv2d: in_channels (",
                   o.in_channels_, ") and out_channels (", o.out_channels_, ") must be divisible by groups (", o.groups_,
                   ")");
  KILN_CHECK_VALUE(o.kernel_size_.h > 0 && o.kernel_size_.w > 0 && o.stride_.h > 0 && o.stride_.w > 0 &&
                       o.dilation_.h > 0 && o.dilation_.w > 0 && o.padding_.h >= 0 && o.padding_.w >= 0,
                   "Conv2d: invalid kernel_size ", o.kernel_size_, ", stride ", o.stride_, ", dilation ", o.dilation_,
                   " or padding ", o.padding_);
  weight = register_parameter(
      "weight", empty({o.out_channels_, o.in_channels_ / o.groups_, o.kernel_size_.h, o.kernel_size_.w}));
  if (o.bias_) bias = register_parameter("bias", empty({o.out_channels_}));
  reset_parameters(generator_or_default(o.generator_));
}

void Conv2d::reset_parameters(Generator& gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), init::FanMode::fan_in, init::Nonlinearity::leaky_relu, gen);
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(double(init::calculate_fan_in_and_fan_out(weight).first));
    init::uniform_(bias, -bound, bound, gen);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  check_defined(x, "Conv2d::forward");
  const int64_t c = options.in_channels_;
  KILN_CHECK_VALUE(x.dim() == 4 && x.size(1) == c, "Conv2d(in_channels=", c, ", out_channels=", options.out_channels_,
                   "): expected input of shape (N, ", c, ", H, W), got ", x.shape());
  auto conv = kiln::Conv2dOptions().stride(options.stride_).padding(options.padding_).dilation(options.dilation_)
                  .groups(options.groups_);
  return kiln::conv2d(x, weight, bias, conv);
}

std::string Conv2d::extra_repr() const {
  const auto& o = options;
  return detail::str_cat(o.in_channels_, ", ", o.out_channels_, ", kernel_size=", o.kernel_size_,
                         ", stride=", o.stride_, ", padding=", o.padding_, o.groups_ != 1 ? ", groups=" : "",
                         o.groups_ != 1 ? std::to_string(o.groups_) : "", o.bias_ ? "" : ", bias=false");
}

}  // namespace kiln::nn
