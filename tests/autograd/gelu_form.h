// Which GELU form a kernel computes, judged from its outputs: GPT-2's tanh form or the erf form.
// Shared by the GPU test of cuBLASLt's epilogue (test_cuda_linear_gelu_linear.cpp) and its CPU test
// on synthetic outputs (test_gelu_form.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace kiln::test {

inline double gelu_tanh_form(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
inline double gelu_erf_form(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

// Note [Judging the GELU form]
// The two forms differ by at most 4.7e-4 (at |x| = 2.7) and by under 1e-4 over much of [-4, 4], so
// a mean error over the whole range cannot tell them apart once the kernel has an error of its own:
// a hardware tanh.approx (which cuBLASLt may use) leaves ~1.1e-4, and "mean error to tanh * 4 < mean
// error to erf" then fails although the form is tanh. Where the forms differ most, 2.2 < |x| < 3.2
// (gap 2.7e-4 to 4.7e-4), each output votes for the form it is closer to; noise below half the gap
// cannot flip a vote.
struct GeluFormVotes {
  int64_t tanh = 0, erf = 0;
  int64_t points() const { return tanh + erf; }
  // At least `min_points` in the band and 90% of them for tanh.
  bool tanh_form(int64_t min_points = 100) const { return points() >= min_points && tanh * 10 >= points() * 9; }
  bool erf_form(int64_t min_points = 100) const { return points() >= min_points && erf * 10 >= points() * 9; }
};

inline GeluFormVotes gelu_form_votes(const std::vector<double>& x, const std::vector<double>& y) {
  GeluFormVotes v;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    const double a = std::fabs(x[i]);
    if (a <= 2.2 || a >= 3.2) continue;
    if (std::fabs(y[i] - gelu_tanh_form(x[i])) < std::fabs(y[i] - gelu_erf_form(x[i])))
      ++v.tanh;
    else
      ++v.erf;
  }
  return v;
}

}  // namespace kiln::test
