// CifarCnn: a small fast CNN for CIFAR-10 in the spirit of airbench: three conv groups
// (conv3x3 -> maxpool2 -> BN -> GELU -> conv3x3 -> BN -> GELU), a global pool and a scaled
// bias-free linear head. Parameter names match tests/parity/gen_cnn.py's PyTorch twin.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <kiln/core/arg.h>
#include <kiln/core/generator.h>
#include <kiln/nn/activation.h>
#include <kiln/nn/container.h>
#include <kiln/nn/conv.h>
#include <kiln/nn/linear.h>
#include <kiln/nn/normalization.h>

namespace kiln::models {

enum class CifarPool { max, avg };

/// Note [CifarCnn]
/// Differences from airbench94, on purpose: no data-dependent whitening layer (a plain first
/// group instead), BatchNorm with learnable weight and bias and torch's default eps/momentum
/// unless set, and convolutions without bias (BN follows each). The head is airbench's:
/// Linear(widths.back(), num_classes, bias=false) whose output is multiplied by head_scale
/// (1/9 by default, as airbench; 1 gives a plain linear head). With 32x32 inputs the groups see
/// 32, 16 and 8 pixels square and the global pool reduces 4x4. Under autocast the convolutions
/// and the head run in the low dtype and BatchNorm in f32 (Note [Autocast op lists]).
struct CifarCnnConfig {
  std::vector<int64_t> widths_ = {64, 256, 256};  ///< output channels of each group
  KILN_ARG(int64_t, in_channels) = 3;
  KILN_ARG(int64_t, num_classes) = 10;
  KILN_ARG(CifarPool, pool) = CifarPool::max;  ///< the global pool before the head
  KILN_ARG(double, head_scale) = 1.0 / 9.0;
  KILN_ARG(double, bn_momentum) = 0.1;
  KILN_ARG(double, bn_eps) = 1e-5;

  CifarCnnConfig& widths(std::vector<int64_t> w) { widths_ = std::move(w); return *this; }

  static CifarCnnConfig standard() { return {}; }                    ///< 64/256/256
  static CifarCnnConfig tiny() { return CifarCnnConfig().widths({16, 32, 32}); }  ///< CPU tests
};

/// conv1 (3x3, pad 1) -> max_pool2d(2) -> norm1 -> GELU -> conv2 (3x3, pad 1) -> norm2 -> GELU.
class CifarConvGroup : public nn::Module {
 public:
  CifarConvGroup(int64_t in_channels, int64_t out_channels, const CifarCnnConfig& config, Generator& gen);
  /// x (N, in, H, W) -> (N, out, H/2, W/2).
  Tensor forward(const Tensor& x);
  std::string name() const override { return "CifarConvGroup"; }

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> norm1, norm2;
  std::shared_ptr<nn::GELU> act;
};

/// The CIFAR-10 CNN of the file's header, built from a CifarCnnConfig.
class CifarCnn : public nn::Module {
 public:
  /// Weights drawn from `gen` with torch's default inits (Conv2d and Linear), BN ones/zeros.
  explicit CifarCnn(const CifarCnnConfig& config, Generator& gen);
  explicit CifarCnn(const CifarCnnConfig& config = {});  ///< the default generator

  /// images (N, in_channels, H, W), H and W divisible by 2^groups -> logits (N, num_classes).
  Tensor forward(const Tensor& images);

  std::string name() const override { return "CifarCnn"; }
  std::string extra_repr() const override;
  const CifarCnnConfig& config() const { return config_; }

  std::shared_ptr<nn::ModuleList> groups;  ///< of CifarConvGroup
  std::shared_ptr<nn::Linear> head;

 private:
  CifarCnnConfig config_;
};

}  // namespace kiln::models
