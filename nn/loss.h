// Loss modules wrapping kiln::cross_entropy and kiln::mse_loss, with input/target shape checks
// that name the loss and both shapes.
#pragma once

#include <kiln/autograd/ops/cross_entropy.h>
#include <kiln/core/arg.h>
#include <kiln/nn/module.h>

namespace kiln::nn {

/// ignore_index, label_smoothing, reduction (torch's CrossEntropyLoss options).
using CrossEntropyLossOptions = CrossEntropyOptions;

/// The cross entropy of logits and class targets as a module (torch.nn.CrossEntropyLoss).
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(const CrossEntropyLossOptions& opts = {}) : options(opts) {}
  /// logits (..., C), targets (...) of i64/i32 class ids -> a scalar (or (...) with Reduction::none).
  Tensor forward(const Tensor& logits, const Tensor& targets);
  std::string name() const override { return "CrossEntropyLoss"; }

  CrossEntropyLossOptions options;
};

/// Options of MSELoss: the reduction.
struct MSELossOptions {
  KILN_ARG(Reduction, reduction) = Reduction::mean;
};

/// The mean squared error as a module (torch.nn.MSELoss).
class MSELoss : public Module {
 public:
  explicit MSELoss(const MSELossOptions& opts = {}) : options(opts) {}
  /// input and target of the same shape.
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string name() const override { return "MSELoss"; }

  MSELossOptions options;
};

}  // namespace kiln::nn
