// Dropout module: picks the generator and passes the training flag to kiln::dropout.
#include <kiln/nn/dropout.h>

#include <kiln/autograd/ops/dropout.h>

namespace kiln::nn {

Dropout::Dropout(const DropoutOptions& opts) : options(opts) {
  KILN_CHECK_VALUE(options.p_ >= 0.0 && options.p_ <= 1.0, "Dropout: probability p must be in [0, 1], got ", options.p_);
  KILN_CHECK_VALUE(!(options.generator_ && options.seed_), "Dropout: give either a generator or a seed, not both");
  if (options.seed_) own_generator_.emplace(*options.seed_);
}

Generator& Dropout::generator() {
  if (own_generator_) return *own_generator_;
  return options.generator_ ? *options.generator_ : default_generator();
}

Tensor Dropout::forward(const Tensor& x) {
  check_defined(x, "Dropout::forward");
  return kiln::dropout(x, options.p_, is_training(), generator());
}

std::string Dropout::extra_repr() const { return detail::str_cat("p=", options.p_); }

}  // namespace kiln::nn
