// MaxPool2d and AdaptiveAvgPool2d: option validation and input checks around the pooling ops.
#include <kiln/nn/pooling.h>

namespace kiln::nn {

MaxPool2d::MaxPool2d(const MaxPool2dOptions& opts) : options(opts) {
  const auto& o = options;
  Size2 s = o.stride_.value_or(o.kernel_size_);
  KILN_CHECK(o.kernel_size_.h > 0 && o.kernel_size_.w > 0 && s.h > 0 && s.w > 0, "MaxPool2d: kernel_size ",
             o.kernel_size_, " and stride ", s, " must be positive");
  KILN_CHECK(o.padding_.h >= 0 && o.padding_.w >= 0 && 2 * o.padding_.h <= o.kernel_size_.h &&
                 2 * o.padding_.w <= o.kernel_size_.w,
             "MaxPool2d: padding ", o.padding_, " must be non-negative and at most half of kernel_size ",
             o.kernel_size_);
}

Tensor MaxPool2d::forward(const Tensor& x) {
  check_defined(x, "MaxPool2d::forward");
  KILN_CHECK(x.dim() == 4, "MaxPool2d(kernel_size=", options.kernel_size_,
             "): expected input of shape (N, C, H, W), got ", x.shape());
  return kiln::max_pool2d(x, options.kernel_size_, options.stride_, options.padding_);
}

std::string MaxPool2d::extra_repr() const {
  return detail::str_cat("kernel_size=", options.kernel_size_, ", stride=",
                         options.stride_.value_or(options.kernel_size_), ", padding=", options.padding_);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(const AdaptiveAvgPool2dOptions& opts) : options(opts) {
  KILN_CHECK(options.output_size_.h > 0 && options.output_size_.w > 0, "AdaptiveAvgPool2d: output_size ",
             options.output_size_, " must be positive");
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  check_defined(x, "AdaptiveAvgPool2d::forward");
  KILN_CHECK(x.dim() == 4 && x.size(2) > 0 && x.size(3) > 0, "AdaptiveAvgPool2d(output_size=", options.output_size_,
             "): expected input of shape (N, C, H, W) with H, W > 0, got ", x.shape());
  return kiln::adaptive_avg_pool2d(x, options.output_size_);
}

std::string AdaptiveAvgPool2d::extra_repr() const { return detail::str_cat("output_size=", options.output_size_); }

}  // namespace kiln::nn
