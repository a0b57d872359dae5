// Flatten: merges dims start_dim..end_dim into one (a view when the strides allow), as torch's
// nn.Flatten (defaults 1, -1: keeps the batch dim).
#pragma once

#include <cstdint>

#include <kiln/nn/module.h>

namespace kiln::nn {

/// Options of Flatten: the first and last dimension flattened.
struct FlattenOptions {
  int64_t start_dim_ = 1, end_dim_ = -1;
  FlattenOptions& start_dim(int64_t d) { start_dim_ = d; return *this; }
  FlattenOptions& end_dim(int64_t d) { end_dim_ = d; return *this; }
};

/// Flattens dimensions start_dim..end_dim into one (torch.nn.Flatten).
class Flatten : public Module {
 public:
  explicit Flatten(const FlattenOptions& opts = {}) : options(opts) {}
  Tensor forward(const Tensor& x);
  std::string name() const override { return "Flatten"; }
  std::string extra_repr() const override;

  FlattenOptions options;
};

}  // namespace kiln::nn
