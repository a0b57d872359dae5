// AdamW against a plain double reimplementation of torch.optim.AdamW's update, over 10 steps with
// made-up gradients, for every option combination, two groups with different lrs, in f64 and f32.
#include "trajectory.h"

#include <cmath>

using namespace kiln;
using kiln::test::RefParam;

namespace {

// torch.optim.AdamW (_single_tensor_adamw), in double. r.step is the count before this update.
void ref_adamw(const optim::AdamWOptions& o, RefParam& r, const std::vector<double>& grad) {
  const size_t n = grad.size();
  const auto [b1, b2] = o.betas();
  auto& m = r.state["exp_avg"];
  auto& v = r.state["exp_avg_sq"];
  auto& vmax = r.state["max_exp_avg_sq"];
  m.resize(n, 0.0);
  v.resize(n, 0.0);
  vmax.resize(n, 0.0);
  const double t = static_cast<double>(r.step + 1);
  const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
  for (size_t j = 0; j < n; ++j) {
    r.p[j] *= 1 - o.lr() * o.weight_decay();
    m[j] = b1 * m[j] + (1 - b1) * grad[j];
    v[j] = b2 * v[j] + (1 - b2) * grad[j] * grad[j];
    vmax[j] = std::max(vmax[j], v[j]);
    const double second = o.amsgrad() ? vmax[j] : v[j];
    const double denom = std::sqrt(second) / std::sqrt(bc2) + o.eps();
    r.p[j] -= o.lr() / bc1 * m[j] / denom;
  }
}

}  // namespace

TEST_CASE("AdamW matches torch's update for every option combination") {
  for (DType dt : {DType::f64, DType::f32})
    for (double wd : {0.0, 0.1})
      for (bool amsgrad : {false, true})
        for (auto betas : {std::pair{0.9, 0.999}, std::pair{0.8, 0.95}})
          for (double eps : {1e-8, 1e-3}) {
            CAPTURE(dt);
            CAPTURE(wd);
            CAPTURE(amsgrad);
            CAPTURE(betas.first);
            CAPTURE(eps);
            const auto base = optim::AdamWOptions(0.05).betas(betas).eps(eps).weight_decay(wd).amsgrad(amsgrad);
            const auto second = optim::AdamWOptions(base).lr(0.01);
            const double rtol = dt == DType::f64 ? 1e-12 : 3e-5, atol = dt == DType::f64 ? 1e-13 : 3e-6;
            test::run_trajectory(
                {{{3, 4}, {5}}, {{2, 3}}}, dt,
                [&](std::vector<std::vector<Tensor>> p) {
                  return std::make_unique<optim::AdamW>(
                      std::vector<optim::AdamW::Group>{{p[0], base}, {p[1], second}});
                },
                [&](size_t g, RefParam& r, const std::vector<double>& grad) {
                  ref_adamw(g == 0 ? base : second, r, grad);
                },
                rtol, atol);
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
