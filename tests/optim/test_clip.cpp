// clip_grad_norm: the total norm (2, 1, 3 and inf) against hand-computed values, the in-place
// scaling, gradients left alone under max_norm, skipped parameters, and inf/NaN behaviour.
#include "test_util.h"

#include <cmath>
#include <limits>

using namespace kiln;

namespace {

Tensor param_with_grad(std::vector<double> g, DType dt = DType::f32) {
  Tensor p = zeros({static_cast<int64_t>(g.size())}, dt);
  p.set_grad(from_vector(g, {static_cast<int64_t>(g.size())}).to(dt));
  return p;
}

}  // namespace

TEST_CASE("2-norm over all gradients, scaled in place by max_norm / (total + 1e-6)") {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor a = param_with_grad({3, 0, -4}, dt), b = param_with_grad({12}, dt);
    Tensor none = zeros({2}, dt);  // no grad: skipped
    Tensor ga = a.grad();
    const double total = optim::clip_grad_norm({a, none, b}, 6.5);
    CHECK(total == doctest::Approx(13.0).epsilon(1e-15));
    const double coef = 6.5 / (13.0 + 1e-6);
    const double tol = dt == DType::f32 ? 1e-7 : 1e-15;
    CHECK(a.grad().is_same(ga));  // in place
    test::check_close(a.grad(), {3 * coef, 0, -4 * coef}, tol, 0, "a");
    test::check_close(b.grad(), {12 * coef}, tol, 0, "b");
    CHECK_FALSE(none.grad().defined());
  }
}

TEST_CASE("gradients under max_norm are left exactly as they were") {
  Tensor a = param_with_grad({0.1, -0.2});
  std::vector<double> before = test::values(a.grad());
  const double total = optim::clip_grad_norm({a}, 1.0);
  CHECK(total == doctest::Approx(std::sqrt(0.05)).epsilon(1e-7));
  test::check_close(a.grad(), before, 0, 0, "unchanged");
  CHECK(optim::clip_grad_norm({zeros({3})}, 1.0) == 0.0);  // no gradients at all
}

TEST_CASE("other norm types: 1, 3 and inf") {
  Tensor a = param_with_grad({1, -2}, DType::f64), b = param_with_grad({-5, 0.5}, DType::f64);
  CHECK(optim::clip_grad_norm({a, b}, 100.0, 1.0) == doctest::Approx(8.5).epsilon(1e-15));
  const double p3 = std::cbrt(1 + 8 + 125 + 0.125);
  CHECK(optim::clip_grad_norm({a, b}, 100.0, 3.0) == doctest::Approx(p3).epsilon(1e-14));
  const double inf_total = optim::clip_grad_norm({a, b}, 2.5, optim::kInfNorm);
  CHECK(inf_total == 5.0);
  const double coef = 2.5 / (5.0 + 1e-6);
  test::check_close(b.grad(), {-5 * coef, 0.5 * coef}, 1e-15, 0, "inf-norm scaling");
  CHECK_ERROR_CONTAINS(optim::clip_grad_norm({a}, 1.0, 0.0), "norm_type", "0");
  CHECK_ERROR_CONTAINS(optim::clip_grad_norm({a}, -1.0), "max_norm", "-1");
}

TEST_CASE("non-finite norms follow torch 1.13 (error_if_nonfinite=false)") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  SUBCASE("an infinite gradient entry: total inf, coefficient 0") {
    Tensor a = param_with_grad({1, inf}), b = param_with_grad({2});
    const double total = optim::clip_grad_norm({a, b}, 1.0);
    CHECK(std::isinf(total));
    auto av = test::values(a.grad());
    CHECK(av[0] == 0.0);
    CHECK(std::isnan(av[1]));  // inf * 0
    CHECK(test::values(b.grad())[0] == 0.0);
  }
  SUBCASE("a NaN gradient entry: total NaN, every gradient becomes NaN") {
    Tensor a = param_with_grad({1, nan}), b = param_with_grad({2});
    CHECK(std::isnan(optim::clip_grad_norm({a, b}, 1.0)));
    CHECK(std::isnan(test::values(b.grad())[0]));
    Tensor c = param_with_grad({nan, 1}), d = param_with_grad({3});
    CHECK(std::isnan(optim::clip_grad_norm({c, d}, 1.0, optim::kInfNorm)));  // NaN wins over max
  }
  SUBCASE("error_if_nonfinite throws and leaves the gradients") {
    Tensor a = param_with_grad({1, inf}), b = param_with_grad({2});
    CHECK_ERROR_CONTAINS(optim::clip_grad_norm({a, b}, 1.0, 2.0, true), "total norm", "inf", "error_if_nonfinite");
    CHECK(test::values(b.grad())[0] == 2.0);
  }
  SUBCASE("large f32 values do not overflow: the norm is computed in double") {
    Tensor a = param_with_grad({3e30, 4e30});
    CHECK(optim::clip_grad_norm({a}, 1.0) == doctest::Approx(5e30).epsilon(1e-7));
    test::check_close(a.grad(), {0.6, 0.8}, 1e-6, 0, "scaled to unit norm");
  }
}
