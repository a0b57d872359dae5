// AdamW against a plain double reimplementation of torch.optim.AdamW's update, over 10 steps with
// made-up gradients, for every option combination, two groups with different lrs, in f64 and f32.
#include "reference_optim.h"

using namespace kiln;

TEST_CASE("AdamW matches torch's update for every option combination") {
  for (DType dt : {DType::f64, DType::f32})
    for (double wd : {0.0, 0.1})
      for (bool amsgrad : {false, true})
        for (auto betas : {std::pair{0.9, 0.999}, std::pair{0.8, 0.95}})
          for (double eps : {1e-8, 1e-3}) {
            const auto o = optim::AdamWOptions(0.05).betas(betas).eps(eps).weight_decay(wd).amsgrad(amsgrad);
            CAPTURE(dt);
            CAPTURE(o);
            const double rtol = dt == DType::f64 ? 1e-12 : 3e-5, atol = dt == DType::f64 ? 1e-13 : 3e-6;
            test::check_against_reference<optim::AdamW>(dt, o, 0.01, rtol, atol);
          }
}

TEST_CASE("AdamW: first step is lr * sign(g) (up to eps) after decoupled decay") {
  Tensor a = test::random({6}, DType::f64, 1);
  std::vector<double> a0 = test::values(a);
  optim::AdamW opt({a}, optim::AdamWOptions(0.01).weight_decay(0.5).eps(0));
  Tensor g = test::random({6}, DType::f64, 2);
  a.set_grad(g);
  opt.step();
  std::vector<double> gv = test::values(g), expect(6);
  for (int j = 0; j < 6; ++j) expect[j] = a0[j] * (1 - 0.01 * 0.5) - 0.01 * (gv[j] > 0 ? 1 : -1);
  test::check_close(a, expect, 1e-13, 0, "first AdamW step");
  CHECK(opt.state(0, 0).step == 1);
  CHECK(opt.state(0, 0).buffers.size() == 2);
}

TEST_CASE("AdamW: strided parameter and gradient are updated in place") {
  Tensor base = test::random({4, 6}, DType::f32, 1);
  Tensor p = base.t();  // (6, 4), not contiguous
  Tensor q = base.clone().t().contiguous();
  optim::AdamW opt_p({p}, optim::AdamWOptions(0.1));
  optim::AdamW opt_q({q}, optim::AdamWOptions(0.1));
  Tensor g = test::random({4, 6}, DType::f32, 2).t();
  p.set_grad(g);
  q.set_grad(g.contiguous());
  opt_p.step();
  opt_q.step();
  test::check_close(p, test::values(q), 0, 0, "strided vs contiguous");
  test::check_close(base.t(), test::values(q), 0, 0, "update reached the base storage");
}

TEST_CASE("AdamW: invalid options are refused with their values") {
  Tensor a = test::random({3}, DType::f32, 1);
  CHECK_ERROR_CONTAINS(optim::AdamW({a}, optim::AdamWOptions(0.1).betas({1.0, 0.9})), "beta1", "1");
  CHECK_ERROR_CONTAINS(optim::AdamW({a}, optim::AdamWOptions(0.1).betas({0.9, -0.5})), "beta2", "-0.5");
  CHECK_ERROR_CONTAINS(optim::AdamW({a}, optim::AdamWOptions(0.1).eps(-1)), "eps", "-1");
  CHECK_ERROR_CONTAINS(optim::AdamW({a}, optim::AdamWOptions(0.1).weight_decay(-2)), "weight_decay", "-2");
  optim::AdamW opt({a}, optim::AdamWOptions(0.1));
  CHECK_ERROR_CONTAINS(opt.set_lr(0, -3), "learning rate", "-3");
  CHECK(opt.lr(0) == 0.1);
}
