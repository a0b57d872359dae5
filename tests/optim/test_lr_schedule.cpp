// LR schedules: values at chosen steps against their formulas (torch's StepLR and LinearLR closed
// forms, llm.c's warmup + cosine), and LRScheduler's LambdaLR behaviour on an optimizer's groups.
#include "test_util.h"

#include <cmath>
#include <numbers>

using namespace kiln;

TEST_CASE("constant") {
  for (int64_t s : {0, 1, 100}) CHECK(optim::constant_factor(s) == 1.0);
  CHECK(optim::constant_schedule()(7) == 1.0);
}

TEST_CASE("warmup then cosine to min_factor") {
  const auto o = optim::WarmupCosineOptions(10, 110).min_factor(0.1);
  CHECK(optim::warmup_cosine_factor(0, o) == doctest::Approx(0.1).epsilon(1e-15));
  CHECK(optim::warmup_cosine_factor(4, o) == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(optim::warmup_cosine_factor(9, o) == doctest::Approx(1.0).epsilon(1e-15));
  CHECK(optim::warmup_cosine_factor(10, o) == doctest::Approx(1.0).epsilon(1e-15));  // cos(0)
  CHECK(optim::warmup_cosine_factor(60, o) == doctest::Approx(0.55).epsilon(1e-15));  // halfway: min + 0.45
  const double at35 = 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 25.0 / 100.0));
  CHECK(optim::warmup_cosine_factor(35, o) == doctest::Approx(at35).epsilon(1e-15));
  CHECK(optim::warmup_cosine_factor(110, o) == 0.1);
  CHECK(optim::warmup_cosine_factor(1000, o) == 0.1);
  // Monotone decay after warmup.
  for (int64_t s = 10; s < 110; ++s)
    CHECK(optim::warmup_cosine_factor(s + 1, o) <= optim::warmup_cosine_factor(s, o));
  CHECK_ERROR_CONTAINS(optim::warmup_cosine_schedule(optim::WarmupCosineOptions(10, 10)), "warmup_steps 10",
                       "total_steps 10");
  CHECK_ERROR_CONTAINS(optim::warmup_cosine_schedule(optim::WarmupCosineOptions(1, 10).min_factor(2)), "min_factor",
                       "2");
}

TEST_CASE("step decay is torch's StepLR") {
  // StepLR(step_size=3, gamma=0.5): lr at epochs 0..7 = base * [1,1,1,.5,.5,.5,.25,.25]
  const double expect[] = {1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25};
  for (int64_t s = 0; s < 8; ++s) CHECK(optim::step_decay_factor(s, 3, 0.5) == expect[s]);
  CHECK_ERROR_CONTAINS(optim::step_decay_schedule(0, 0.5), "step_size", "0");
}

TEST_CASE("linear is torch's LinearLR") {
  // LinearLR(start_factor=1, end_factor=0.2, total_iters=4): 1, .8, .6, .4, .2, .2
  const auto o = optim::LinearOptions(0.2, 4);
  const double expect[] = {1.0, 0.8, 0.6, 0.4, 0.2, 0.2};
  for (int64_t s = 0; s < 6; ++s) CHECK(optim::linear_factor(s, o) == doctest::Approx(expect[s]).epsilon(1e-15));
  // LinearLR's default start_factor 1/3 ramping up to 1 over 5 steps.
  const auto up = optim::LinearOptions(1.0, 5).start_factor(1.0 / 3);
  CHECK(optim::linear_factor(0, up) == doctest::Approx(1.0 / 3).epsilon(1e-15));
  CHECK(optim::linear_factor(3, up) == doctest::Approx(1.0 / 3 + (2.0 / 3) * 3 / 5).epsilon(1e-15));
  CHECK(optim::linear_factor(9, up) == doctest::Approx(1.0).epsilon(1e-15));
}

TEST_CASE("LRScheduler scales every group's base lr like LambdaLR") {
  Tensor a = test::random({2}), b = test::random({3});
  optim::SGD opt(std::vector<optim::SGD::Group>{{{a}, optim::SGDOptions(0.1)}, {{b}, optim::SGDOptions(0.02)}});
  optim::LRScheduler sched(opt, optim::step_decay_schedule(2, 0.1));
  CHECK(sched.last_step() == 0);
  CHECK(opt.lr(0) == doctest::Approx(0.1));
  CHECK(opt.initial_lr(1) == 0.02);
  sched.step();
  sched.step();
  CHECK(sched.last_step() == 2);
  CHECK(opt.lr(0) == doctest::Approx(0.01).epsilon(1e-15));
  CHECK(opt.lr(1) == doctest::Approx(0.002).epsilon(1e-15));
  auto lrs = sched.last_lr();
  REQUIRE(lrs.size() == 2);
  CHECK(lrs[1] == opt.lr(1));
  sched.set_step(5);
  CHECK(opt.lr(0) == doctest::Approx(0.1 * 0.01).epsilon(1e-15));
  // A second scheduler built later (e.g. after a restore) keeps the recorded base lr.
  optim::LRScheduler again(opt, optim::step_decay_schedule(2, 0.1));
  CHECK(opt.lr(0) == doctest::Approx(0.1));
  // The base lr travels in the optimizer's state_dict.
  optim::SGD fresh(std::vector<optim::SGD::Group>{{{a}, optim::SGDOptions(0.7)}, {{b}, optim::SGDOptions(0.7)}});
  fresh.load_state_dict(opt.state_dict());
  CHECK(fresh.initial_lr(0) == 0.1);
  CHECK(fresh.lr(1) == opt.lr(1));
  CHECK_ERROR_CONTAINS(optim::LRScheduler(opt, [](int64_t) { return -1.0; }), "factor -1", "step 0");
}
