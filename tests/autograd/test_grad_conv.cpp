// gradcheck (float64 finite differences) for the differentiable conv2d and pooling ops over their
// options (stride, padding, dilation, groups, bias), plus hand-checked gradients and bad inputs.
#include <algorithm>
#include <numeric>
#include <random>

#include "test_util.h"

using namespace kiln;

// Calls are qualified: an ops:: argument (Conv2dOptions, Size2) makes ADL also find the raw
// kiln::ops overloads, which an unqualified call could not tell apart.

namespace {
// Distinct values (a shuffled 0.1-spaced ramp) so a max never ties, even after an eps nudge.
Tensor distinct(const Shape& s, uint64_t seed) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  std::iota(v.begin(), v.end(), 0.0);
  std::shuffle(v.begin(), v.end(), std::mt19937_64(seed));
  for (double& e : v) e = 0.1 * e - 1.0;
  Tensor t = from_vector(v, s);
  t.requires_grad_();
  return t;
}
}  // namespace

TEST_CASE("gradcheck: conv2d over stride, padding, dilation and groups, with and without bias") {
  struct Case {
    const char* name;
    Conv2dOptions options;
    int64_t groups;
  };
  const Case cases[] = {
      {"plain", Conv2dOptions(), 1},
      {"stride 2, padding 1", Conv2dOptions().stride(2).padding(1), 1},
      {"stride (2, 1), padding (0, 2)", Conv2dOptions().stride({2, 1}).padding({0, 2}), 1},
      {"dilation 2, padding 1", Conv2dOptions().dilation(2).padding(1), 1},
      {"groups 2", Conv2dOptions().groups(2), 2},
      {"depthwise, stride 2, padding 1", Conv2dOptions().groups(4).stride(2).padding(1), 4},
  };
  for (const Case& c : cases) {
    for (bool with_bias : {true, false}) {
      const std::string name = c.name;
      CAPTURE(name);
      CAPTURE(with_bias);
      Tensor x = test::grad_leaf({2, 4, 6, 5}, 1), w = test::grad_leaf({8, 4 / c.groups, 3, 2}, 2);
      Conv2dOptions o = c.options;
      if (with_bias) {
        Tensor b = test::grad_leaf({8}, 3);
        CHECK(gradcheck([o](const auto& v) { return kiln::conv2d(v[0], v[1], v[2], o); }, {x, w, b}));
      } else {
        CHECK(gradcheck([o](const auto& v) { return kiln::conv2d(v[0], v[1], Tensor(), o); }, {x, w}));
      }
    }
  }
}

TEST_CASE("conv2d: gradients go only to the inputs that require them") {
  Tensor x = test::random({1, 2, 4, 4}, DType::f64, 4);
  Tensor w = test::grad_leaf({3, 2, 3, 3}, 5), b = test::random({3}, DType::f64, 6);
  kiln::conv2d(x, w, b).backward(ones({1, 3, 2, 2}, DType::f64));
  CHECK(w.grad().defined());
  CHECK(w.grad().shape() == Shape{3, 2, 3, 3});
  CHECK_FALSE(x.grad().defined());
  // dL/dw[o, c, i, j] with L = sum(out): the sum of x over the 2x2 output positions the tap sees.
  double expected = 0;
  for (int64_t oy = 0; oy < 2; ++oy)
    for (int64_t ox = 0; ox < 2; ++ox) expected += test::at(x, {0, 1, oy + 2, ox + 1});
  CHECK(test::at(w.grad(), {2, 1, 2, 1}) == doctest::Approx(expected));
  // Without grad mode nothing is recorded.
  NoGradGuard no_grad;
  CHECK_FALSE(kiln::conv2d(x, w, b).requires_grad());
}

TEST_CASE("gradcheck: max_pool2d with padding and stride != kernel, on inputs without ties") {
  CHECK(gradcheck([](const auto& v) { return kiln::max_pool2d(v[0], 3, 2, 1); }, {distinct({2, 3, 7, 6}, 7)}));
  CHECK(gradcheck([](const auto& v) { return kiln::max_pool2d(v[0], {2, 3}, Size2{1, 2}, {1, 0}); },
                  {distinct({2, 2, 5, 7}, 8)}));
  CHECK(gradcheck([](const auto& v) { return kiln::max_pool2d(v[0], 2); }, {distinct({3, 4, 6}, 9)}));  // (C, H, W)
}

TEST_CASE("max_pool2d: the gradient goes to each window's argmax") {
  Tensor x = from_vector(std::vector<double>{1, 5, 0, 2, 3, 2, 9, 4, 7, 1, 0, 6, 8, 2, 3, 1}, {1, 1, 4, 4});
  x.requires_grad_();
  Tensor y = kiln::max_pool2d(x, 2);
  CHECK(test::values(y) == std::vector<double>{5, 9, 8, 6});
  y.backward(from_vector(std::vector<double>{1, 2, 3, 4}, {1, 1, 2, 2}));
  CHECK(test::values(x.grad()) == std::vector<double>{0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 4, 3, 0, 0, 0});
}

TEST_CASE("gradcheck: avg_pool2d and adaptive_avg_pool2d") {
  CHECK(gradcheck([](const auto& v) { return kiln::avg_pool2d(v[0], 3, 2, 1); }, {test::grad_leaf({2, 3, 7, 6}, 10)}));
  CHECK(gradcheck([](const auto& v) { return kiln::avg_pool2d(v[0], {2, 3}, Size2{1, 2}, {1, 0}); },
                  {test::grad_leaf({2, 2, 5, 7}, 11)}));
  CHECK(gradcheck([](const auto& v) { return kiln::avg_pool2d(v[0], 2); }, {test::grad_leaf({3, 4, 6}, 12)}));
  // Overlapping windows (5 -> 3 rows), shrinking, identity, and a global pool.
  CHECK(gradcheck([](const auto& v) { return kiln::adaptive_avg_pool2d(v[0], {3, 2}); }, {test::grad_leaf({2, 3, 5, 7}, 13)}));
  CHECK(gradcheck([](const auto& v) { return kiln::adaptive_avg_pool2d(v[0], {5, 7}); }, {test::grad_leaf({1, 2, 5, 7}, 14)}));
  CHECK(gradcheck([](const auto& v) { return kiln::adaptive_avg_pool2d(v[0], 1); }, {test::grad_leaf({3, 4, 5}, 15)}));
}

TEST_CASE("avg_pool2d: padding counts in the divisor of the gradient") {
  Tensor x = test::grad_leaf({1, 1, 2, 2}, 16);
  kiln::avg_pool2d(x, 2, 1, 1).backward(ones({1, 1, 3, 3}, DType::f64));
  // Every input pixel lies in 4 of the 9 windows, each dividing by the full 2x2 kernel.
  CHECK(test::values(x.grad()) == std::vector<double>{1, 1, 1, 1});
  Tensor z = test::grad_leaf({1, 1, 4, 6}, 17);
  kiln::adaptive_avg_pool2d(z, {1, 2}).backward(ones({1, 1, 1, 2}, DType::f64));
  test::check_close(z.grad(), std::vector<double>(24, 1.0 / 12), 1e-12, 0, "adaptive 1/12");
}

TEST_CASE("conv and pooling: bad inputs are reported with their shapes") {
  Tensor x = test::grad_leaf({1, 4, 6, 6}, 18);
  CHECK_ERROR_CONTAINS(kiln::conv2d(x, test::grad_leaf({2, 3, 3, 3}, 19)), "conv2d", "channels", "[2, 3, 3, 3]");
  CHECK_ERROR_CONTAINS(kiln::conv2d(x, test::grad_leaf({2, 4, 3, 3}, 20), test::grad_leaf({3}, 21)), "conv2d", "bias", "[3]");
  CHECK_ERROR_CONTAINS(kiln::conv2d(x, test::grad_leaf({3, 2, 3, 3}, 22), Tensor(), Conv2dOptions().groups(2)), "groups 2",
                       "output channels");
  CHECK_ERROR_CONTAINS(kiln::max_pool2d(x, 2, std::nullopt, 2), "max_pool2d", "padding");
  CHECK_ERROR_CONTAINS(kiln::avg_pool2d(test::grad_leaf({4, 6}, 23), 2), "avg_pool2d", "[4, 6]");
  CHECK_ERROR_CONTAINS(kiln::adaptive_avg_pool2d(x, {0, 2}), "adaptive_avg_pool2d", "positive");
}
