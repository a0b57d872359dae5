// Dropout: zeroes elements with probability p while the module is training (identity in eval).
// The mask comes from a seeded Generator: the options' generator, a generator the module owns
// when a seed is given, or the process default.
#pragma once

#include <cstdint>
#include <optional>

#include <kiln/core/generator.h>
#include <kiln/nn/module.h>

namespace kiln::nn {

/// Options of Dropout: the drop probability and where the masks are drawn from.
struct DropoutOptions {
  double p_ = 0.5;
  Generator* generator_ = nullptr;
  std::optional<uint64_t> seed_;

  DropoutOptions(double p = 0.5) : p_(p) {}  // NOLINT: Dropout(0.1) reads naturally
  DropoutOptions& p(double v) { p_ = v; return *this; }
  DropoutOptions& generator(Generator& g) { generator_ = &g; return *this; }
  DropoutOptions& seed(uint64_t s) { seed_ = s; return *this; }
};

/// Zeroes each element with probability p in training and scales the rest by 1/(1-p); the identity
/// in eval mode (torch.nn.Dropout).
class Dropout : public Module {
 public:
  explicit Dropout(const DropoutOptions& options = {});

  Tensor forward(const Tensor& x);
  /// Where the masks are drawn from (see the file comment).
  Generator& generator();

  std::string name() const override { return "Dropout"; }
  std::string extra_repr() const override;

  DropoutOptions options;

 private:
  std::optional<Generator> own_generator_;
};

}  // namespace kiln::nn
