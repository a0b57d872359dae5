// Flatten module: checks the dims against the input before flattening.
#include <kiln/nn/flatten.h>

namespace kiln::nn {

Tensor Flatten::forward(const Tensor& x) {
  check_defined(x, "Flatten::forward");
  const int64_t n = x.dim(), s = options.start_dim_, e = options.end_dim_;
  const int64_t ws = s < 0 ? s + n : s, we = e < 0 ? e + n : e;
  KILN_CHECK_VALUE(ws >= 0 && ws < n && we >= 0 && we < n && ws <= we, "Flatten(start_dim=", s, ", end_dim=", e,
                   "): invalid for an input of shape ", x.shape());
  return x.flatten(ws, we);
}

std::string Flatten::extra_repr() const {
  return detail::str_cat("start_dim=", options.start_dim_, ", end_dim=", options.end_dim_);
}

}  // namespace kiln::nn
