// Conv2d over NCHW with torch's parameter shapes, options and default init (weight
// kaiming_uniform(a=sqrt(5)), bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))).
#pragma once

#include <cstdint>

#include <kiln/autograd/ops/conv.h>
#include <kiln/core/generator.h>
#include <kiln/nn/module.h>

namespace kiln::nn {

/// Options of Conv2d (torch.nn.Conv2d's arguments).
struct Conv2dOptions {
  int64_t in_channels_, out_channels_;
  Size2 kernel_size_;
  Size2 stride_{1}, padding_{0}, dilation_{1};
  int64_t groups_ = 1;
  bool bias_ = true;
  Generator* generator_ = nullptr;  ///< init draws; null: the default generator

  Conv2dOptions(int64_t in_channels, int64_t out_channels, Size2 kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  Conv2dOptions& stride(Size2 s) { stride_ = s; return *this; }
  Conv2dOptions& padding(Size2 p) { padding_ = p; return *this; }
  Conv2dOptions& dilation(Size2 d) { dilation_ = d; return *this; }
  Conv2dOptions& groups(int64_t g) { groups_ = g; return *this; }
  Conv2dOptions& bias(bool b) { bias_ = b; return *this; }
  Conv2dOptions& generator(Generator& g) { generator_ = &g; return *this; }
};

/// 2-D convolution over (N, C, H, W) inputs (torch.nn.Conv2d), weights initialized as torch does.
class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& options);

  /// x (N, in_channels, H, W) -> (N, out_channels, OH, OW).
  Tensor forward(const Tensor& x);
  void reset_parameters(Generator& gen);

  std::string name() const override { return "Conv2d"; }
  std::string extra_repr() const override;

  Conv2dOptions options;
  Tensor weight;  ///< (out_channels, in_channels / groups, kh, kw)
  Tensor bias;    ///< (out_channels), undefined without bias
};

}  // namespace kiln::nn
