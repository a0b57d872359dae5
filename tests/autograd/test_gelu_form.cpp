// The GELU-form judgement of the epilogue's GPU test (Note [Judging the GELU form], gelu_form.h) on
// synthetic outputs: each form with a kernel's error of its own, and the mean-error rule it replaced.
#include "test_util.h"

#include <random>

#include "autograd/gelu_form.h"

using namespace kiln;

namespace {
struct Samples {
  std::vector<double> x, y;
};
// 801 points in [-4, 4], as the GPU test: `form` plus uniform noise in [-amplitude, amplitude].
template <class Form>
Samples sample(Form form, double amplitude, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> noise(-amplitude, amplitude);
  Samples s;
  for (int i = 0; i < 801; ++i) {
    const double x = -4.0 + 8.0 * i / 800;
    s.x.push_back(x);
    s.y.push_back(form(x) + noise(rng));
  }
  return s;
}
double mean_error(const Samples& s, double (*form)(double)) {
  double e = 0;
  for (size_t i = 0; i < s.x.size(); ++i) e += std::fabs(s.y[i] - form(s.x[i]));
  return e / double(s.x.size());
}
}  // namespace

TEST_CASE("the tanh form with a tanh.approx-sized error is judged tanh; the mean-error rule said erf-like") {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const Samples s = sample(test::gelu_tanh_form, 1.1e-4, seed);
    const test::GeluFormVotes v = test::gelu_form_votes(s.x, s.y);
    INFO("seed ", seed, ": tanh ", v.tanh, ", erf ", v.erf);
    CHECK(v.points() >= 190);
    CHECK(v.tanh_form());
    CHECK_FALSE(v.erf_form());
    // The rule this replaced fails on the same outputs.
    CHECK_FALSE(mean_error(s, test::gelu_tanh_form) * 4 < mean_error(s, test::gelu_erf_form));
  }
}

TEST_CASE("the erf form is judged erf, exact or with the same error") {
  for (double amplitude : {0.0, 1.1e-4}) {
    const Samples s = sample(test::gelu_erf_form, amplitude, 7);
    const test::GeluFormVotes v = test::gelu_form_votes(s.x, s.y);
    INFO("amplitude ", amplitude, ": tanh ", v.tanh, ", erf ", v.erf);
    CHECK(v.erf_form());
    CHECK_FALSE(v.tanh_form());
  }
}

TEST_CASE("too few points in the band judge nothing") {
  const test::GeluFormVotes v = test::gelu_form_votes({2.5, -2.7, 3.0}, {test::gelu_tanh_form(2.5),
                                                                          test::gelu_tanh_form(-2.7),
                                                                          test::gelu_tanh_form(3.0)});
  CHECK(v.tanh == 3);
  CHECK_FALSE(v.tanh_form());
}
