// gradcheck: compares autograd's gradients with central finite differences in float64.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <kiln/core/tensor.h>

namespace kiln {

/// Step and tolerances of gradcheck's finite differences (torch.autograd.gradcheck's eps, atol, rtol).
struct GradcheckOptions {
  double eps_ = 1e-6;
  double atol_ = 1e-5;
  double rtol_ = 1e-3;
  uint64_t seed_ = 0;
  GradcheckOptions& eps(double v) { eps_ = v; return *this; }
  GradcheckOptions& atol(double v) { atol_ = v; return *this; }
  GradcheckOptions& rtol(double v) { rtol_ = v; return *this; }
  GradcheckOptions& seed(uint64_t v) { seed_ = v; return *this; }
};

/// `fn` maps the inputs to one output tensor. Every f64 input that requires grad is checked:
/// with L = sum(fn(inputs) * w) for a fixed random w, each element's analytic dL/dx must match
/// (L(x + eps) - L(x - eps)) / 2eps. Returns true, or throws kiln::Error naming the input, the
/// element and both values.
bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
               const GradcheckOptions& options = {});

}  // namespace kiln
