// gradcheck (float64 finite differences) for every differentiable elementwise op, with
// broadcasting so gradients must be reduced back to the input shapes.
#include "test_util.h"

using namespace kiln;

namespace {
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
}  // namespace

TEST_CASE("gradcheck: binary ops with broadcasting") {
  const std::pair<const char*, Fn> cases[] = {
      {"add", [](const auto& v) { return v[0] + v[1]; }},
      {"sub", [](const auto& v) { return v[0] - v[1]; }},
      {"mul", [](const auto& v) { return v[0] * v[1]; }},
      {"div", [](const auto& v) { return v[0] / v[1]; }},
      {"maximum", [](const auto& v) { return maximum(v[0], v[1]); }},
      {"minimum", [](const auto& v) { return minimum(v[0], v[1]); }},
  };
  for (auto& [name, fn] : cases) {
    CAPTURE(name);
    Tensor a = test::grad_leaf({3, 1, 4}, 1), b = test::grad_leaf({5, 1}, 2, 0.5, 2.0);
    CHECK(gradcheck(fn, {a, b}));
  }
  Tensor a = test::grad_leaf({3, 4}, 3, 0.5, 2.0), b = test::grad_leaf({4}, 4, -1.0, 1.5);
  CHECK(gradcheck([](const auto& v) { return pow(v[0], v[1]); }, {a, b}));
}

TEST_CASE("gradcheck: scalar forms and unary ops") {
  const std::pair<const char*, Fn> cases[] = {
      {"add s", [](const auto& v) { return v[0] + 1.5; }},
      {"sub s", [](const auto& v) { return v[0] - 1.5; }},
      {"rsub s", [](const auto& v) { return 1.5 - v[0]; }},
      {"mul s", [](const auto& v) { return 2.5 * v[0]; }},
      {"div s", [](const auto& v) { return v[0] / 4.0; }},
      {"pow s", [](const auto& v) { return pow(abs(v[0]) + 0.5, 1.7); }},
      {"neg", [](const auto& v) { return -v[0]; }},
      {"abs", [](const auto& v) { return abs(v[0]); }},
      {"exp", [](const auto& v) { return exp(v[0]); }},
      {"log", [](const auto& v) { return log(abs(v[0]) + 0.5); }},
      {"sqrt", [](const auto& v) { return sqrt(abs(v[0]) + 0.5); }},
      {"rsqrt", [](const auto& v) { return rsqrt(abs(v[0]) + 0.5); }},
      {"square", [](const auto& v) { return square(v[0]); }},
      {"tanh", [](const auto& v) { return tanh(v[0]); }},
      {"sin", [](const auto& v) { return sin(v[0] * 3.0); }},
      {"cos", [](const auto& v) { return cos(v[0] * 3.0); }},
      {"sigmoid", [](const auto& v) { return sigmoid(v[0]); }},
      {"relu", [](const auto& v) { return relu(v[0]); }},
      {"gelu erf", [](const auto& v) { return gelu(v[0]); }},
      {"gelu tanh", [](const auto& v) { return gelu(v[0], GeluApproximate::tanh); }},
  };
  for (auto& [name, fn] : cases) {
    CAPTURE(name);
    CHECK(gradcheck(fn, {test::grad_leaf({4, 5}, 7)}));
  }
}

TEST_CASE("gradcheck: where and masked_fill route gradients past the mask") {
  Tensor cond = ops::gt(test::random({3, 4}, DType::f64, 9), 0.0);
  Tensor a = test::grad_leaf({3, 4}, 10), b = test::grad_leaf({4}, 11);
  CHECK(gradcheck([&](const auto& v) { return where(cond, v[0], v[1]); }, {a, b}));
  Tensor mask = ops::lt(arange(4).view({1, 4}), 2.0);
  CHECK(gradcheck([&](const auto& v) { return masked_fill(v[0], mask, -3.0); }, {test::grad_leaf({3, 4}, 12)}));
}

TEST_CASE("gradcheck catches a wrong gradient") {
  // A deliberately wrong backward: d/dx of (x detached * x) is reported as x, not 2x.
  Tensor x = test::grad_leaf({3}, 13);
  CHECK_ERROR_CONTAINS(gradcheck([](const auto& v) { return v[0].detach() * v[0]; }, {x}), "gradcheck",
                       "analytic", "numeric");
}

TEST_CASE("mixed precision: an f32 op on an f64 leaf returns an f64 gradient") {
  Tensor x = test::grad_leaf({4}, 14);
  Tensor y = x.to(DType::f32) * from_vector(std::vector<float>{1, 2, 3, 4}, {4});
  y.backward(ones({4}));
  CHECK(x.grad().dtype() == DType::f64);
  CHECK(test::values(x.grad()) == std::vector<double>{1, 2, 3, 4});
}
