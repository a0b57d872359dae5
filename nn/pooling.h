// Pooling modules over NCHW: MaxPool2d (stride defaults to the kernel size, as torch) and
// AdaptiveAvgPool2d (a fixed output size whatever the input size).
#pragma once

#include <optional>

#include <kiln/autograd/ops/pool.h>
#include <kiln/core/arg.h>
#include <kiln/nn/module.h>

namespace kiln::nn {

/// Options of MaxPool2d (torch.nn.MaxPool2d's arguments); the stride defaults to the kernel size.
struct MaxPool2dOptions {
  Size2 kernel_size_;
  std::optional<Size2> stride_;  ///< none: kernel_size
  KILN_ARG(Size2, padding) = 0;

  MaxPool2dOptions(Size2 kernel_size) : kernel_size_(kernel_size) {}  // NOLINT: MaxPool2d(2)
  MaxPool2dOptions& stride(Size2 s) { stride_ = s; return *this; }
};

/// 2-D max pooling (torch.nn.MaxPool2d).
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const MaxPool2dOptions& options);
  explicit MaxPool2d(Size2 kernel_size) : MaxPool2d(MaxPool2dOptions(kernel_size)) {}
  /// x (N, C, H, W) -> (N, C, OH, OW).
  Tensor forward(const Tensor& x);
  std::string name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;

  MaxPool2dOptions options;
};

/// Options of AdaptiveAvgPool2d: the output size.
struct AdaptiveAvgPool2dOptions {
  KILN_ARG(Size2, output_size);
  AdaptiveAvgPool2dOptions(Size2 output_size) : output_size_(output_size) {}  // NOLINT: AdaptiveAvgPool2d(1)
};

/// 2-D average pooling to a fixed output size (torch.nn.AdaptiveAvgPool2d).
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(const AdaptiveAvgPool2dOptions& options);
  explicit AdaptiveAvgPool2d(Size2 output_size) : AdaptiveAvgPool2d(AdaptiveAvgPool2dOptions(output_size)) {}
  /// x (N, C, H, W) -> (N, C, output_size.h, output_size.w).
  Tensor forward(const Tensor& x);
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;

  AdaptiveAvgPool2dOptions options;
};

}  // namespace kiln::nn
