// SGD against a plain double reimplementation of torch.optim.SGD's update, over 10 steps with
// made-up gradients, for every option combination, two groups with different lrs, in f64 and f32.
#include "reference_optim.h"

using namespace kiln;

TEST_CASE("SGD matches torch's update for every option combination") {
  for (DType dt : {DType::f64, DType::f32})
    for (const optim::SGDOptions& o : test::sgd_option_cases()) {
      CAPTURE(dt);
      CAPTURE(o);
      const double rtol = dt == DType::f64 ? 1e-12 : 2e-5, atol = dt == DType::f64 ? 1e-13 : 2e-6;
      test::check_against_reference<optim::SGD>(dt, o, 0.02, rtol, atol);
    }
}

TEST_CASE("SGD: one flat group, add_param_group, and the gradient is not modified") {
  Tensor a = test::random({4}, DType::f64, 1), b = test::random({2, 2}, DType::f64, 2);
  optim::SGD opt({a}, optim::SGDOptions(0.5).momentum(0.9).nesterov(true).weight_decay(0.1));
  opt.add_param_group({{b}, optim::SGDOptions(0.25)});
  REQUIRE(opt.num_param_groups() == 2);
  CHECK(opt.lr(0) == 0.5);
  CHECK(opt.lr(1) == 0.25);
  Tensor ga = test::random({4}, DType::f64, 3);
  std::vector<double> ga_before = test::values(ga), a_before = test::values(a), b_before = test::values(b);
  a.set_grad(ga);
  opt.step();
  test::check_close(ga, ga_before, 0, 0, "gradient untouched");
  test::check_close(b, b_before, 0, 0, "b has no grad: unchanged");
  CHECK(opt.state(1, 0).step == 0);
  // First step with nesterov: d = g + wd*p; buf = d; p -= lr * (d + m * d).
  std::vector<double> expect(4);
  for (int j = 0; j < 4; ++j) {
    double d = ga_before[j] + 0.1 * a_before[j];
    expect[j] = a_before[j] - 0.5 * (d + 0.9 * d);
  }
  test::check_close(a, expect, 1e-14, 0, "first nesterov step");
  test::check_close(opt.state(0, 0).buffers.at("momentum_buffer"),
                    [&] { std::vector<double> d(4); for (int j = 0; j < 4; ++j) d[j] = ga_before[j] + 0.1 * a_before[j]; return d; }(),
                    1e-14, 0, "buffer = first d_p");
}

TEST_CASE("SGD: zero_grad sets to none or zeroes in place") {
  Tensor a = test::random({3}, DType::f32, 1);
  optim::SGD opt({a}, optim::SGDOptions(0.1));
  Tensor g = test::random({3}, DType::f32, 2);
  a.set_grad(g);
  opt.zero_grad(false);
  REQUIRE(a.grad().defined());
  CHECK(a.grad().is_same(g));
  test::check_close(g, {0, 0, 0}, 0, 0, "zeroed");
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("SGD: invalid options and parameters are refused with their values") {
  Tensor a = test::random({3}, DType::f32, 1);
  CHECK_ERROR_CONTAINS(optim::SGD({a}, optim::SGDOptions(-1.0)), "invalid learning rate", "-1");
  CHECK_ERROR_CONTAINS(optim::SGD({a}, optim::SGDOptions(0.1).nesterov(true)), "Nesterov", "momentum 0");
  CHECK_ERROR_CONTAINS(optim::SGD({a}, optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)),
                       "zero dampening", "0.1");
  CHECK_ERROR_CONTAINS(optim::SGD({a, a}, optim::SGDOptions(0.1)), "more than once");
  CHECK_ERROR_CONTAINS(optim::SGD({test::random({2}, DType::bf16, 1)}, optim::SGDOptions(0.1)), "bf16", "f32 or f64");
  optim::SGD opt({a}, optim::SGDOptions(0.1));
  CHECK_ERROR_CONTAINS(opt.add_param_group({{a}, optim::SGDOptions(0.1)}), "more than once");
  a.set_grad(test::random({3}, DType::f64, 2));
  CHECK_ERROR_CONTAINS(opt.step(), "gradient of parameter 0", "f64", "f32");
}

TEST_CASE("SGD: the step records no autograd history") {
  Tensor a = test::random({3}, DType::f32, 1);
  a.requires_grad_();
  optim::SGD opt({a}, optim::SGDOptions(0.1).momentum(0.9));
  a.set_grad(test::random({3}, DType::f32, 2));
  opt.step();
  CHECK(a.is_leaf());
  CHECK(a.requires_grad());
}
