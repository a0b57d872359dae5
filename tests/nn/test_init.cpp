// nn::init: bounds and moments of every initialiser on a large tensor against torch's formulas
// (fans, gains), reproducibility from a seed, and use on parameters that require grad.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "test_util.h"

using namespace kiln;
namespace init = kiln::nn::init;

namespace {

struct Moments {
  double min, max, mean, std;
};

Moments moments(const Tensor& t) {
  std::vector<double> v = test::values(t);
  double sum = 0, sq = 0;
  for (double x : v) sum += x;
  double mean = sum / double(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  return {*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()), mean,
          std::sqrt(sq / double(v.size() - 1))};
}

// U(-b, b): inside the bounds, reaching close to both, mean 0, std b / sqrt(3).
void check_uniform(const Tensor& t, double bound, const char* what) {
  Moments m = moments(t);
  INFO(what, ": bound ", bound, " min ", m.min, " max ", m.max, " mean ", m.mean, " std ", m.std);
  CHECK(m.min >= -bound);
  CHECK(m.max <= bound);
  CHECK(m.min < -0.99 * bound);
  CHECK(m.max > 0.99 * bound);
  CHECK(std::fabs(m.mean) < 0.02 * bound);
  CHECK(m.std == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.02));
}

void check_normal(const Tensor& t, double mean, double std, const char* what) {
  Moments m = moments(t);
  INFO(what, ": mean ", m.mean, " std ", m.std, " expected ", mean, ", ", std);
  CHECK(std::fabs(m.mean - mean) < 0.02 * std);
  CHECK(m.std == doctest::Approx(std).epsilon(0.02));
  CHECK(m.max > mean + 3 * std);  // a normal draw of 100k values has tails
  CHECK(m.min < mean - 3 * std);
}

}  // namespace

TEST_CASE("fan_in/fan_out and gains follow torch") {
  CHECK(init::calculate_fan_in_and_fan_out(empty({200, 500})) == std::pair<int64_t, int64_t>{500, 200});
  CHECK(init::calculate_fan_in_and_fan_out(empty({8, 4, 3, 3})) == std::pair<int64_t, int64_t>{36, 72});
  CHECK_ERROR_CONTAINS(init::calculate_fan_in_and_fan_out(empty({7})), "at least 2 dims", "[7]");
  CHECK(init::calculate_gain(init::Nonlinearity::linear) == 1.0);
  CHECK(init::calculate_gain(init::Nonlinearity::conv2d) == 1.0);
  CHECK(init::calculate_gain(init::Nonlinearity::sigmoid) == 1.0);
  CHECK(init::calculate_gain(init::Nonlinearity::tanh) == doctest::Approx(5.0 / 3.0));
  CHECK(init::calculate_gain(init::Nonlinearity::relu) == doctest::Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain(init::Nonlinearity::leaky_relu) == doctest::Approx(std::sqrt(2.0 / (1 + 1e-4))));
  CHECK(init::calculate_gain(init::Nonlinearity::leaky_relu, std::sqrt(5.0)) == doctest::Approx(std::sqrt(1.0 / 3)));
  CHECK(init::calculate_gain(init::Nonlinearity::selu) == 0.75);
}

TEST_CASE("uniform_, normal_, constant_, zeros_, ones_") {
  Generator g(1);
  Tensor t = empty({200, 500});
  init::uniform_(t, -2.0, 3.0, g);
  Moments m = moments(t);
  CHECK(m.min >= -2.0);
  CHECK(m.max <= 3.0);
  CHECK(m.mean == doctest::Approx(0.5).epsilon(0.05));
  CHECK(m.std == doctest::Approx(5.0 / std::sqrt(12.0)).epsilon(0.02));

  check_normal(init::normal_(t, 1.5, 2.0, g), 1.5, 2.0, "normal_");
  init::constant_(t, 0.25);
  Moments c = moments(t);
  CHECK((c.min == 0.25 && c.max == 0.25));
  CHECK(moments(init::zeros_(t)).max == 0.0);
  CHECK(moments(init::ones_(t)).min == 1.0);
  CHECK_ERROR_CONTAINS(init::uniform_(t, 1.0, 0.0, g), "low 1", "high 0");
  CHECK_ERROR_CONTAINS(init::normal_(t, 0.0, -1.0, g), "negative std");
}

TEST_CASE("kaiming_uniform_ / kaiming_normal_") {
  Generator g(2);
  Tensor w = empty({200, 500});
  // torch's default: leaky_relu, a=0 -> gain sqrt(2), fan_in.
  check_uniform(init::kaiming_uniform_(w, 0.0, init::FanMode::fan_in, init::Nonlinearity::leaky_relu, g),
                std::sqrt(2.0) * std::sqrt(3.0 / 500), "kaiming_uniform_ a=0");
  // Linear's a=sqrt(5): bound 1/sqrt(fan_in).
  check_uniform(init::kaiming_uniform_(w, std::sqrt(5.0), init::FanMode::fan_in, init::Nonlinearity::leaky_relu, g),
                1.0 / std::sqrt(500.0), "kaiming_uniform_ a=sqrt(5)");
  check_uniform(init::kaiming_uniform_(w, 0.0, init::FanMode::fan_out, init::Nonlinearity::relu, g),
                std::sqrt(2.0) * std::sqrt(3.0 / 200), "kaiming_uniform_ fan_out relu");
  check_normal(init::kaiming_normal_(w, 0.0, init::FanMode::fan_out, init::Nonlinearity::relu, g), 0.0,
               std::sqrt(2.0) / std::sqrt(200.0), "kaiming_normal_ fan_out relu");
  Tensor conv = empty({64, 32, 7, 7});  // fan_in 1568, 100k values
  check_normal(init::kaiming_normal_(conv, 0.0, init::FanMode::fan_in, init::Nonlinearity::tanh, g), 0.0,
               (5.0 / 3.0) / std::sqrt(1568.0), "kaiming_normal_ conv tanh");
  CHECK_ERROR_CONTAINS(init::kaiming_uniform_(empty({5}), 0.0, init::FanMode::fan_in,
                                              init::Nonlinearity::leaky_relu, g),
                       "at least 2 dims");
}

TEST_CASE("xavier_uniform_ / xavier_normal_") {
  Generator g(3);
  Tensor w = empty({200, 500});
  check_uniform(init::xavier_uniform_(w, 1.0, g), std::sqrt(6.0 / 700.0), "xavier_uniform_");
  check_uniform(init::xavier_uniform_(w, 2.0, g), 2.0 * std::sqrt(6.0 / 700.0), "xavier_uniform_ gain 2");
  check_normal(init::xavier_normal_(w, 0.5, g), 0.0, 0.5 * std::sqrt(2.0 / 700.0), "xavier_normal_");
}

TEST_CASE("the same seed gives the same values; initialisers work on parameters that require grad") {
  Tensor a = empty({30, 40}), b = empty({30, 40});
  Generator g1(42), g2(42), g3(43);
  init::kaiming_uniform_(a, std::sqrt(5.0), init::FanMode::fan_in, init::Nonlinearity::leaky_relu, g1);
  init::kaiming_uniform_(b, std::sqrt(5.0), init::FanMode::fan_in, init::Nonlinearity::leaky_relu, g2);
  CHECK(test::values(a) == test::values(b));
  init::kaiming_uniform_(b, std::sqrt(5.0), init::FanMode::fan_in, init::Nonlinearity::leaky_relu, g3);
  CHECK(test::values(a) != test::values(b));
  // The generator advances: a second draw differs from the first.
  init::normal_(a, 0.0, 1.0, g1);
  init::normal_(b, 0.0, 1.0, g1);
  CHECK(test::values(a) != test::values(b));

  Tensor p = zeros({4, 4}, DType::f64);
  p.requires_grad_();
  Tensor same = init::xavier_normal_(p, 1.0, g1);
  CHECK(same.is_same(p));
  CHECK(p.requires_grad());
  CHECK(p.is_leaf());
  CHECK(moments(p).std > 0.0);
  CHECK(p.dtype() == DType::f64);
}
