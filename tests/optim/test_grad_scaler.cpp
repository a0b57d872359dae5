// GradScaler: an inf/NaN gradient skips the step and halves the scale, growth after
// growth_interval clean steps, unscale_ before clipping, torch's call-order errors, the cross-rank
// found_inf override, the disabled pass-through, and the state's round trip through a checkpoint.
#include "test_util.h"

#include <cmath>
#include <filesystem>
#include <limits>

#include <unistd.h>

using namespace kiln;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Two parameters and an SGD over them; grads are set to true_grad * scale, as backward of a
// scaled loss would leave them.
struct Setup {
  Tensor p1 = test::random({3, 4}, DType::f32, 1);
  Tensor p2 = test::random({5}, DType::f32, 2);
  optim::SGD opt{{p1, p2}, optim::SGDOptions(0.1)};

  void set_grads(const optim::GradScaler& s, uint64_t seed, double inject = 0.0) {
    Tensor g1 = test::random({3, 4}, DType::f32, seed), g2 = test::random({5}, DType::f32, seed + 1);
    if (inject != 0.0) g2 = from_vector(std::vector<double>{1, inject, 0, 0, 0}, {5}).to(DType::f32);
    p1.set_grad(mul(g1, s.scale_value()));
    p2.set_grad(mul(g2, s.scale_value()));
  }
};

std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kiln_grad_scaler_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

}  // namespace

TEST_CASE("torch's defaults") {
  optim::GradScaler s;
  CHECK(s.scale_value() == 65536.0);
  CHECK(s.options().growth_factor_ == 2.0);
  CHECK(s.options().backoff_factor_ == 0.5);
  CHECK(s.options().growth_interval_ == 2000);
  CHECK(s.is_enabled());
  CHECK_ERROR_CONTAINS(optim::GradScaler(optim::GradScalerOptions().growth_factor(0.5)), "growth_factor", "0.5");
  CHECK_ERROR_CONTAINS(optim::GradScaler(optim::GradScalerOptions().growth_interval(0)), "growth_interval");
}

TEST_CASE("an inf or NaN gradient skips the step and halves the scale") {
  for (double bad : {kInf, -kInf, std::nan("")}) {
    CAPTURE(bad);
    Setup m;
    optim::GradScaler s;
    const std::vector<double> p1_before = test::values(m.p1), p2_before = test::values(m.p2);
    m.set_grads(s, 10, bad);
    CHECK_FALSE(s.step(m.opt));
    CHECK(s.found_inf());
    s.update();
    CHECK(s.scale_value() == 32768.0);
    CHECK(s.growth_tracker() == 0);
    CHECK(test::values(m.p1) == p1_before);
    CHECK(test::values(m.p2) == p2_before);
    CHECK(m.opt.state(0, 0).step == 0);  // the optimizer never ran
  }
}

TEST_CASE("a clean step applies the true (unscaled) gradient") {
  Setup m;
  optim::GradScaler s(optim::GradScalerOptions().init_scale(1024));
  const std::vector<double> p1_before = test::values(m.p1);
  const std::vector<double> g1 = test::values(test::random({3, 4}, DType::f32, 10));
  m.set_grads(s, 10);
  CHECK(s.step(m.opt));
  CHECK_FALSE(s.found_inf());
  std::vector<double> expect(p1_before.size());
  for (size_t i = 0; i < expect.size(); ++i) expect[i] = p1_before[i] - 0.1 * g1[i];
  test::check_close(m.p1, expect, 1e-6, 1e-7, "p1");
  s.update();
  CHECK(s.scale_value() == 1024.0);
  CHECK(s.growth_tracker() == 1);
}

TEST_CASE("the scale doubles after growth_interval consecutive clean steps") {
  Setup m;
  optim::GradScaler s(optim::GradScalerOptions().growth_interval(3));
  std::vector<double> scales;
  for (int step = 0; step < 8; ++step) {
    m.set_grads(s, 100 + step, step == 4 ? kInf : 0.0);
    s.step(m.opt);
    s.update();
    scales.push_back(s.scale_value());
  }
  // Clean, clean, clean (grow), clean, inf (halve, tracker reset), clean, clean, clean (grow).
  CHECK(scales == std::vector<double>{65536, 65536, 131072, 131072, 65536, 65536, 65536, 131072});
  CHECK(s.growth_tracker() == 0);
  CHECK(m.opt.state(0, 0).step == 7);
}

TEST_CASE("growth stops where the f32 scale would overflow") {
  Setup m;
  optim::GradScaler s(optim::GradScalerOptions().init_scale(3e38).growth_interval(1));
  m.p1.set_grad(full({3, 4}, 1.0));  // finite after unscaling
  m.p2.set_grad(full({5}, 1.0));
  CHECK(s.step(m.opt));
  s.update();
  CHECK(s.scale_value() == static_cast<double>(3e38f));
}

TEST_CASE("unscale_ before clipping: clip_grad_norm sees the true gradients") {
  Setup m;
  optim::GradScaler s;
  m.set_grads(s, 20);
  const double true_norm = [&] {
    double acc = 0;
    for (double v : test::values(test::random({3, 4}, DType::f32, 20))) acc += v * v;
    for (double v : test::values(test::random({5}, DType::f32, 21))) acc += v * v;
    return std::sqrt(acc);
  }();
  s.unscale_(m.opt);
  const double total = optim::clip_grad_norm({m.p1, m.p2}, 1.0);
  CHECK(total == doctest::Approx(true_norm).epsilon(1e-6));
  const std::vector<double> clipped = test::values(m.p1.grad()), before = test::values(m.p1);
  CHECK(s.step(m.opt));  // does not unscale a second time
  std::vector<double> expect(before.size());
  for (size_t i = 0; i < expect.size(); ++i) expect[i] = before[i] - 0.1 * clipped[i];
  test::check_close(m.p1, expect, 1e-6, 1e-7, "p1 after a clipped step");
  s.update();
}

TEST_CASE("call order is checked as torch does") {
  Setup m;
  optim::GradScaler s;
  CHECK_ERROR_CONTAINS(s.update(), "no inf checks");
  CHECK_ERROR_CONTAINS(s.set_found_inf(true), "unscale_ first");
  m.set_grads(s, 30);
  s.unscale_(m.opt);
  CHECK_ERROR_CONTAINS(s.unscale_(m.opt), "already called", "SGD", "65536");
  s.step(m.opt);
  CHECK_ERROR_CONTAINS(s.unscale_(m.opt), "after step()");
  CHECK_ERROR_CONTAINS(s.step(m.opt), "already called");
  s.update();
  m.set_grads(s, 31);
  CHECK(s.step(m.opt));  // a new iteration starts after update()
  s.update();
}

TEST_CASE("set_found_inf: the combined cross-rank flag decides the step") {
  Setup m;
  optim::GradScaler s;
  const std::vector<double> before = test::values(m.p1);
  m.set_grads(s, 40);
  s.unscale_(m.opt);
  CHECK_FALSE(s.found_inf());
  s.set_found_inf(true);  // another rank overflowed
  CHECK(s.found_inf());
  CHECK_FALSE(s.step(m.opt));
  CHECK(test::values(m.p1) == before);
  s.update();
  CHECK(s.scale_value() == 32768.0);

  m.set_grads(s, 41, kInf);
  s.unscale_(m.opt);
  CHECK(s.found_inf());
  s.set_found_inf(false);  // the flag is the caller's to set: the step then runs
  CHECK(s.step(m.opt));
  s.update();
  CHECK(s.scale_value() == 32768.0);
  CHECK(s.growth_tracker() == 1);
}

TEST_CASE("scale(loss) is differentiable: backward yields gradients times the scale") {
  Tensor p = test::random({4}, DType::f32, 50).requires_grad_();
  const Tensor c = test::random({4}, DType::f32, 51);
  optim::GradScaler s(optim::GradScalerOptions().init_scale(256));
  Tensor scaled = s.scale(sum(mul(p, c)));
  CHECK(scaled.item() == doctest::Approx(256 * sum(mul(p, c)).item()).epsilon(1e-6));
  scaled.backward();
  std::vector<double> expect = test::values(c);
  for (double& v : expect) v *= 256;
  test::check_close(p.grad(), expect, 0, 0, "grad");
}

TEST_CASE("disabled: every call passes through") {
  Setup m;
  optim::GradScaler s(optim::GradScalerOptions().enabled(false));
  Tensor loss = sum(m.p1);
  CHECK(s.scale(loss).is_same(loss));
  m.p1.set_grad(full({3, 4}, 1.0));
  m.p2.set_grad(full({5}, kInf));
  s.unscale_(m.opt);
  CHECK(test::values(m.p1.grad())[0] == 1.0);
  CHECK(s.step(m.opt));  // no inf check at all
  s.update();
  CHECK(s.state_dict().empty());
}

TEST_CASE("state round trip through a training checkpoint") {
  Setup m;
  optim::GradScaler s(optim::GradScalerOptions().growth_interval(5).backoff_factor(0.25));
  for (int step = 0; step < 4; ++step) {  // inf, then three clean steps: scale 16384, tracker 3
    m.set_grads(s, 60 + step, step == 0 ? kInf : 0.0);
    s.step(m.opt);
    s.update();
  }
  REQUIRE(s.scale_value() == 16384.0);
  REQUIRE(s.growth_tracker() == 3);
  optim::TrainingProgress progress;
  progress.global_step = 4;
  for (const auto& [name, t] : s.state_dict()) progress.extra.emplace_back("grad_scaler." + name, t);
  const std::string path = tmp_path("ckpt.safetensors");
  optim::save_checkpoint(path, {{"p1", m.p1}, {"p2", m.p2}}, m.opt, progress);

  Setup fresh;
  optim::GradScaler restored;  // default options until the state is loaded
  optim::TrainingProgress loaded = optim::load_checkpoint(path, {{"p1", fresh.p1}, {"p2", fresh.p2}}, fresh.opt);
  std::filesystem::remove(path);
  optim::NamedTensors state;
  for (const auto& [name, t] : loaded.extra)
    if (name.rfind("grad_scaler.", 0) == 0) state.emplace_back(name.substr(12), t);
  CHECK(state.size() == 5);
  restored.load_state_dict(state);
  CHECK(restored.scale_value() == 16384.0);
  CHECK(restored.growth_tracker() == 3);
  CHECK(restored.options().growth_interval_ == 5);
  CHECK(restored.options().backoff_factor_ == 0.25);
  // Both continue identically: the second clean step grows the scale, then an inf quarters it.
  for (optim::GradScaler* x : {&s, &restored}) {
    Setup& mm = x == &s ? m : fresh;
    for (int step = 0; step < 2; ++step) {
      CHECK(x->scale_value() == 16384.0);
      mm.set_grads(*x, 70 + step);
      x->step(mm.opt);
      x->update();
    }
    CHECK(x->scale_value() == 32768.0);
    mm.set_grads(*x, 72, kInf);
    x->step(mm.opt);
    x->update();
    CHECK(x->scale_value() == 8192.0);
  }
  CHECK(test::values(m.p1) == test::values(fresh.p1));
}

TEST_CASE("load_state_dict validates before changing anything") {
  optim::GradScaler s;
  optim::NamedTensors good = optim::GradScaler(optim::GradScalerOptions().init_scale(8)).state_dict();
  optim::NamedTensors missing(good.begin(), good.end() - 1);
  CHECK_ERROR_CONTAINS(s.load_state_dict(missing), "growth_interval", "missing");
  optim::NamedTensors bad_tracker = good;
  bad_tracker[1].second = scalar_tensor(5000, TensorOptions(DType::i64));
  CHECK_ERROR_CONTAINS(s.load_state_dict(bad_tracker), "growth_tracker", "5000");
  optim::NamedTensors wrong_dtype = good;
  wrong_dtype[0].second = scalar_tensor(8, TensorOptions(DType::f64));
  CHECK_ERROR_CONTAINS(s.load_state_dict(wrong_dtype), "scale", "f32");
  optim::NamedTensors extra = good;
  extra.emplace_back("bogus", scalar_tensor(1));
  CHECK_ERROR_CONTAINS(s.load_state_dict(extra), "bogus");
  CHECK_ERROR_CONTAINS(s.load_state_dict({}), "empty");
  CHECK(s.scale_value() == 65536.0);  // untouched by the refused dicts
  s.load_state_dict(good);
  CHECK(s.scale_value() == 8.0);
}
