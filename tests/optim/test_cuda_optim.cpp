// The fused CUDA optimizers, clip_grad_norm and GradScaler against the CPU path (issue #4): the
// same initial parameters and gradients on both sides, compared after every step. The lists mix
// sizes (0, 1, odd, a chunk, over a chunk) and hold more tensors than one launch table, and
// skipped steps (GradScaler's found_inf, read on the device) must leave no trace.
#include "test_util.h"
#include "reference_optim.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include <kiln/core/dispatch.h>

using namespace kiln;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kChunk = 65536;  // core/cuda/kernels/multi_tensor.h kChunkSize

std::string str(const std::string& what, size_t k) { return what + " " + std::to_string(k); }

// A leaf on the device holding the values of `cpu`.
Tensor cuda_leaf(const Tensor& cpu) {
  Tensor t = cpu.detach().to(Device::cuda());
  t.requires_grad_();
  return t;
}

Tensor cuda_scalar(double v) { return full(Shape{}, v, TensorOptions(DType::f32).device(Device::cuda())); }

// Sizes 0, 1, odd, one chunk, just over, several chunks, and 100 small odd ones: 110 tensors, more
// than one launch table holds (36 to 110 tensors, see optim_step.cu).
std::vector<Shape> mixed_shapes() {
  std::vector<Shape> s = {{1}, {7}, {3, 5}, {0}, {513}, {kChunk}, {kChunk + 1}, {2 * kChunk + 100}, {4, 33, 17}, {1, 1}};
  for (int k = 0; k < 100; ++k) s.push_back({(k * 37) % 700 + 1});
  return s;
}

// The same random parameters on the CPU and on the device, and the same made-up gradients.
struct Twins {
  std::vector<Tensor> cpu, gpu;

  Twins(const std::vector<Shape>& shapes, DType dt, uint64_t seed) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      Tensor p = test::random(shapes[k], dt, seed + k);
      p.requires_grad_();
      cpu.push_back(p);
      gpu.push_back(cuda_leaf(p));
    }
  }

  // Some parameters have no gradient on some steps (they must then not move at all).
  void set_grads(int64_t step) {
    for (size_t k = 0; k < cpu.size(); ++k) {
      if (k % 5 == 1 && step % 3 == 2) {
        cpu[k].set_grad(Tensor());
        gpu[k].set_grad(Tensor());
        continue;
      }
      Tensor g = test::random(cpu[k].shape(), cpu[k].dtype(), 1000 + 37 * uint64_t(step) + k, -1.5, 1.5);
      cpu[k].set_grad(g);
      gpu[k].set_grad(g.to(Device::cuda()));
    }
  }

  void check(double rtol, double atol, const std::string& what) const {
    for (size_t k = 0; k < cpu.size(); ++k)
      test::check_cuda_matches(gpu[k].detach(), cpu[k].detach(), rtol, atol, str(what + ": param", k));
  }

  void check_grads(double rtol, double atol, const std::string& what) const {
    for (size_t k = 0; k < cpu.size(); ++k) {
      REQUIRE(cpu[k].grad().defined() == gpu[k].grad().defined());
      if (cpu[k].grad().defined())
        test::check_cuda_matches(gpu[k].grad(), cpu[k].grad(), rtol, atol, str(what + ": grad", k));
    }
  }

  // [first, last) of each list, for parameter groups.
  std::vector<Tensor> cpu_range(size_t first, size_t last) const { return {cpu.begin() + first, cpu.begin() + last}; }
  std::vector<Tensor> gpu_range(size_t first, size_t last) const { return {gpu.begin() + first, gpu.begin() + last}; }
};

// Every parameter's step count and every buffer the CPU optimizer holds.
void check_states(const optim::Optimizer& gpu, const optim::Optimizer& cpu, double rtol, double atol,
                  const std::string& what) {
  REQUIRE(gpu.num_param_groups() == cpu.num_param_groups());
  for (size_t g = 0; g < cpu.num_param_groups(); ++g)
    for (size_t i = 0; i < cpu.params(g).size(); ++i) {
      const std::string where = what + ": group " + std::to_string(g) + " param " + std::to_string(i);
      const optim::ParamState& c = cpu.state(g, i);
      const optim::ParamState& d = gpu.state(g, i);
      CHECK_MESSAGE(d.step == c.step, where, ": step ", d.step, " vs CPU ", c.step);
      for (const auto& [key, buf] : c.buffers) {
        REQUIRE_MESSAGE(d.buffers.count(key), where, ": no ", key, " on the device");
        test::check_cuda_matches(d.buffers.at(key), buf, rtol, atol, where + " " + key);
      }
    }
}

double rtol_for(DType dt) { return dt == DType::f64 ? 1e-12 : 1e-6; }

// `steps` steps of the same optimizer on both sides, from `t`'s made-up gradients; the parameters
// are compared after every step and the states at the end.
void step_both(optim::Optimizer& cpu, optim::Optimizer& gpu, Twins& t, int64_t steps, double tol,
               const std::string& what) {
  for (int64_t s = 0; s < steps; ++s) {
    t.set_grads(s);
    cpu.step();
    gpu.step();
    t.check(tol, tol, what + " step " + std::to_string(s));
  }
  check_states(gpu, cpu, tol, tol, what);
}

// Two groups, split at `split` (a launch set each), with options `o0` and `o1`.
template <class Optimizer, class Options>
void check_two_groups(DType dt, uint64_t seed, size_t split, const Options& o0, const Options& o1,
                      const std::string& what) {
  Twins t(mixed_shapes(), dt, seed);
  Optimizer cpu({{t.cpu_range(0, split), o0}, {t.cpu_range(split, t.cpu.size()), o1}});
  Optimizer gpu({{t.gpu_range(0, split), o0}, {t.gpu_range(split, t.gpu.size()), o1}});
  step_both(cpu, gpu, t, 10, rtol_for(dt), what);
}

// Plants `v` at flat index `at` of a contiguous CPU tensor.
Tensor planted(Tensor t, int64_t at, double v) {
  t = t.contiguous().clone();
  dispatch_floating(t.dtype(), "planted", [&]<class T>() { t.data<T>()[at] = static_cast<T>(static_cast<float>(v)); });
  return t;
}

}  // namespace

TEST_CASE("AdamW on CUDA follows the CPU path step for step") {
  test::require_cuda();
  for (DType dt : {DType::f32, DType::f64})
    for (bool amsgrad : {false, true})
      for (double wd : {0.0, 0.1}) {
        const auto o0 = optim::AdamWOptions(2e-2).betas({0.9, 0.99}).weight_decay(wd).amsgrad(amsgrad);
        CAPTURE(dt);
        CAPTURE(o0);
        check_two_groups<optim::AdamW>(dt, 11, 70, o0, optim::AdamWOptions(o0).lr(5e-3).eps(1e-6), "AdamW");
      }
}

TEST_CASE("SGD on CUDA follows the CPU path for every option combination") {
  test::require_cuda();
  for (DType dt : {DType::f32, DType::f64})
    for (const optim::SGDOptions& o0 : test::sgd_option_cases()) {
      CAPTURE(dt);
      CAPTURE(o0);
      check_two_groups<optim::SGD>(dt, 23, 50, o0, optim::SGDOptions(o0).lr(0.02), "SGD");
    }
}

TEST_CASE("a list over several launch tables: 45 tensors, then one cut by a full table of blocks") {
  test::require_cuda();
  std::vector<Shape> shapes;
  for (int k = 0; k < 45; ++k) shapes.push_back({k * 11 + 1});
  shapes.push_back({330 * kChunk + 11});  // > 320 blocks by itself
  shapes.push_back({3});
  {
    Twins t(shapes, DType::f32, 5);
    const auto o = optim::AdamWOptions(1e-2).amsgrad(true);
    optim::AdamW cpu(t.cpu, o), gpu(t.gpu, o);
    step_both(cpu, gpu, t, 3, 1e-6, "AdamW (big)");
  }
  {
    Twins t(shapes, DType::f32, 6);
    const auto o = optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(0.01);
    optim::SGD cpu(t.cpu, o), gpu(t.gpu, o);
    step_both(cpu, gpu, t, 3, 1e-6, "SGD (big)");
  }
}

TEST_CASE("step(found_inf) skips on the device: no parameter, buffer or step count moves") {
  test::require_cuda();
  // Steps 0, 3 and 4 are skipped on the device (the CPU optimizer just does not step), so the
  // first real update of every parameter comes after a skipped one: AdamW's bias corrections and
  // SGD's first momentum buffer must follow the device step counts.
  const std::vector<bool> skip = {true, false, false, true, true, false, false};
  auto run = [&](optim::Optimizer& cpu, optim::Optimizer& gpu, Twins& t, const std::string& what) {
    for (size_t s = 0; s < skip.size(); ++s) {
      t.set_grads(static_cast<int64_t>(s));
      // The flag on the device, except once as a CPU tensor (moved to the device by the optimizer).
      Tensor flag = s == 4 ? scalar_tensor(1.0, TensorOptions(DType::f32)) : cuda_scalar(skip[s] ? 1.0 : 0.0);
      gpu.step(flag);
      if (!skip[s]) cpu.step();
      t.check(1e-6, 1e-6, what + " step " + std::to_string(s));
      check_states(gpu, cpu, 1e-6, 1e-6, what + " step " + std::to_string(s));
    }
  };
  {
    Twins t(mixed_shapes(), DType::f32, 31);
    const auto o = optim::AdamWOptions(1e-2).amsgrad(true);
    optim::AdamW cpu(t.cpu, o), gpu(t.gpu, o);
    run(cpu, gpu, t, "AdamW");
  }
  {
    Twins t(mixed_shapes(), DType::f32, 32);
    const auto o = optim::SGDOptions(0.1).momentum(0.9).dampening(0.25).weight_decay(0.01);
    optim::SGD cpu(t.cpu, o), gpu(t.gpu, o);
    run(cpu, gpu, t, "SGD");
  }
}

TEST_CASE("SGD: momentum switched on mid-run under a skipped step starts its buffer at the next real one") {
  test::require_cuda();
  Twins t({{5}, {kChunk + 3}}, DType::f32, 41);
  optim::SGD cpu(t.cpu, optim::SGDOptions(0.1)), gpu(t.gpu, optim::SGDOptions(0.1));
  int64_t s = 0;
  for (; s < 2; ++s) {
    t.set_grads(s);
    cpu.step();
    gpu.step();
  }
  const auto with_momentum = optim::SGDOptions(0.1).momentum(0.9).dampening(0.5);
  cpu.set_options(0, with_momentum);
  gpu.set_options(0, with_momentum);
  t.set_grads(s++);
  gpu.step(cuda_scalar(1.0));  // skipped: Note [Fresh momentum buffers] drops the new buffer
  CHECK(gpu.state(0, 0).buffers.count("momentum_buffer") == 0);
  for (; s < 6; ++s) {
    t.set_grads(s);
    cpu.step();
    gpu.step(cuda_scalar(0.0));
    t.check(1e-6, 1e-6, "step " + std::to_string(s));
  }
  check_states(gpu, cpu, 1e-6, 1e-6, "SGD");
}

TEST_CASE("a CUDA optimizer resumes from a CPU state_dict, and its own state_dict reads the device steps") {
  test::require_cuda();
  Twins t({{3, 4}, {kChunk + 9}, {1}}, DType::f32, 51);
  const auto o = optim::AdamWOptions(1e-2).amsgrad(true);
  optim::AdamW cpu(t.cpu, o);
  for (int64_t s = 0; s < 3; ++s) {
    t.set_grads(s);
    cpu.step();
  }
  for (size_t k = 0; k < t.cpu.size(); ++k) t.gpu[k] = cuda_leaf(t.cpu[k]);
  optim::AdamW gpu(t.gpu, o);
  gpu.load_state_dict(cpu.state_dict());
  for (int64_t s = 3; s < 6; ++s) {
    t.set_grads(s);
    cpu.step();
    gpu.step();
  }
  t.check(1e-6, 1e-6, "resumed AdamW");
  const optim::NamedTensors c = cpu.state_dict(), d = gpu.state_dict();
  REQUIRE(test::names(c) == test::names(d));
  for (size_t k = 0; k < c.size(); ++k) {
    if (c[k].second.dtype() == DType::f32)
      test::check_cuda_matches(d[k].second, c[k].second, 1e-6, 1e-6, c[k].first);
    else
      CHECK_MESSAGE(d[k].second.item() == c[k].second.item(), c[k].first);
  }
}

TEST_CASE("a strided CUDA parameter is updated through a contiguous copy") {
  test::require_cuda();
  Tensor cpu_p = test::random({6, 5}, DType::f32, 61);
  cpu_p.requires_grad_();
  Tensor gpu_p = test::to_cuda(cpu_p.detach(), /*strided=*/true);
  REQUIRE_FALSE(gpu_p.is_contiguous());
  gpu_p.requires_grad_();
  optim::AdamW cpu({cpu_p}, optim::AdamWOptions(1e-2)), gpu({gpu_p}, optim::AdamWOptions(1e-2));
  for (int64_t s = 0; s < 3; ++s) {
    Tensor g = test::random({6, 5}, DType::f32, 70 + uint64_t(s));
    cpu_p.set_grad(g);
    gpu_p.set_grad(g.to(Device::cuda()));
    cpu.step();
    gpu.step();
  }
  test::check_cuda_matches(gpu_p.detach(), cpu_p.detach(), 1e-6, 1e-6, "strided param");
}

TEST_CASE("clip_grad_norm on CUDA: the norm and the clipped gradients match the CPU's") {
  test::require_cuda();
  for (double norm_type : {2.0, 1.0, optim::kInfNorm, 3.0})
    for (double max_norm : {0.5, 1e9}) {
      CAPTURE(norm_type);
      CAPTURE(max_norm);
      for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
        CAPTURE(dt);
        Twins t(mixed_shapes(), dt, 71);
        t.set_grads(0);
        const double cpu_total = optim::clip_grad_norm(t.cpu, max_norm, norm_type);
        Tensor gpu_total = optim::clip_grad_norm_tensor(t.gpu, max_norm, norm_type);
        CHECK(gpu_total.device().is_cuda());
        CHECK(gpu_total.dtype() == DType::f64);
        CHECK(gpu_total.numel() == 1);
        CHECK(gpu_total.item() == doctest::Approx(cpu_total).epsilon(1e-10));
        t.check_grads(test::cuda_rtol(dt), test::cuda_rtol(dt), "clipped");
      }
    }
  // The double-returning form reads the same norm back.
  Twins t(mixed_shapes(), DType::f32, 72);
  t.set_grads(1);
  const double cpu_total = optim::clip_grad_norm(t.cpu, 0.1);
  CHECK(optim::clip_grad_norm(t.gpu, 0.1) == doctest::Approx(cpu_total).epsilon(1e-10));
  t.check_grads(1e-6, 1e-6, "clipped (double form)");
}

TEST_CASE("clip_grad_norm on CUDA: non-finite norms as on the CPU, error_if_nonfinite, mixed devices") {
  test::require_cuda();
  for (double bad : {kInf, std::nan("")}) {
    CAPTURE(bad);
    Twins t(mixed_shapes(), DType::f32, 81);
    t.set_grads(0);
    Tensor g = planted(t.cpu[6].grad(), 17, bad);  // the tensor just over a chunk
    t.cpu[6].set_grad(g);
    t.gpu[6].set_grad(g.to(Device::cuda()));
    const std::vector<std::vector<double>> before = [&] {
      std::vector<std::vector<double>> v;
      for (const Tensor& p : t.gpu) v.push_back(p.grad().defined() ? test::values(p.grad()) : std::vector<double>{});
      return v;
    }();
    CHECK_ERROR_CONTAINS(optim::clip_grad_norm_tensor(t.gpu, 1.0, 2.0, /*error_if_nonfinite=*/true),
                         "error_if_nonfinite");
    for (size_t k = 0; k < t.gpu.size(); ++k)
      if (t.gpu[k].grad().defined()) test::check_close(t.gpu[k].grad(), before[k], 0, 0, str("untouched grad", k));
    const double cpu_total = optim::clip_grad_norm(t.cpu, 1.0);
    const double gpu_total = optim::clip_grad_norm_tensor(t.gpu, 1.0).item();
    CHECK((std::isnan(cpu_total) ? std::isnan(gpu_total) : gpu_total == cpu_total));
    t.check_grads(0, 0, "non-finite clip");  // zeros and NaNs, exactly as on the CPU
  }
  Tensor a = test::random({3}, DType::f32, 1), b = cuda_leaf(test::random({3}, DType::f32, 2));
  a.requires_grad_();
  a.set_grad(test::random({3}, DType::f32, 3));
  b.set_grad(test::random({3}, DType::f32, 4).to(Device::cuda()));
  CHECK_ERROR_CONTAINS(optim::clip_grad_norm({a, b}, 1.0), "one device");
}

TEST_CASE("GradScaler on CUDA: unscale_, skipped steps, backoff and growth as on the CPU") {
  test::require_cuda();
  Twins t({{3, 4}, {5}, {kChunk + 1}, {1}}, DType::f32, 91);
  const auto so = optim::SGDOptions(0.1).momentum(0.9);
  optim::SGD cpu_opt(t.cpu, so), gpu_opt(t.gpu, so);
  const auto go = optim::GradScalerOptions().init_scale(1024).growth_interval(2);
  optim::GradScaler cpu_s(go), gpu_s(go);
  // Step 1: an inf in the big tensor; 4: a NaN in the one-element one; 6: every rank but this
  // one found an inf (the cross-rank override); the others are clean (growth every 2).
  for (int64_t s = 0; s < 9; ++s) {
    CAPTURE(s);
    const double scale = cpu_s.scale_value();
    REQUIRE(gpu_s.scale_value() == scale);
    for (size_t k = 0; k < t.cpu.size(); ++k) {
      Tensor g = ops::mul(test::random(t.cpu[k].shape(), DType::f32, 500 + 10 * uint64_t(s) + k), scale);
      if (s == 1 && k == 2) g = planted(g, kChunk, kInf);
      if (s == 4 && k == 3) g = planted(g, 0, std::nan(""));
      t.cpu[k].set_grad(g);
      t.gpu[k].set_grad(g.to(Device::cuda()));
    }
    cpu_s.unscale_(cpu_opt);
    gpu_s.unscale_(gpu_opt);
    if (s == 6) {
      cpu_s.set_found_inf(true);
      Tensor all_ranks = gpu_s.found_inf_tensor();  // what the trainer all-reduces
      CHECK(all_ranks.device().is_cuda());
      CHECK(all_ranks.item() == 0.0);
      gpu_s.set_found_inf(cuda_scalar(1.0));
    }
    CHECK(gpu_s.found_inf() == cpu_s.found_inf());
    t.check_grads(1e-6, 1e-6, "unscaled");
    optim::clip_grad_norm(t.cpu, 1.0);
    optim::clip_grad_norm_tensor(t.gpu, 1.0);
    std::vector<std::vector<double>> gpu_before;
    for (const Tensor& p : t.gpu) gpu_before.push_back(test::values(p.detach()));
    const bool cpu_stepped = cpu_s.step(cpu_opt);
    const bool gpu_stepped = s % 2 == 0 ? gpu_s.step(gpu_opt) : gpu_s.step_async(gpu_opt).item() == 0.0;
    CHECK(gpu_stepped == cpu_stepped);
    CHECK(cpu_stepped == (s != 1 && s != 4 && s != 6));
    cpu_s.update();
    gpu_s.update();
    CHECK(gpu_s.scale_value() == cpu_s.scale_value());
    CHECK(gpu_s.growth_tracker() == cpu_s.growth_tracker());
    t.check(1e-6, 1e-6, "params");
    if (!cpu_stepped)
      for (size_t k = 0; k < t.gpu.size(); ++k)
        test::check_close(t.gpu[k].detach(), gpu_before[k], 0, 0, str("param after a skipped step", k));
  }
  CHECK(cpu_s.scale_value() != 1024.0);  // it moved
  check_states(gpu_opt, cpu_opt, 1e-6, 1e-6, "SGD under GradScaler");
  const optim::NamedTensors c = cpu_s.state_dict(), d = gpu_s.state_dict();
  REQUIRE(test::names(c) == test::names(d));
  for (size_t k = 0; k < c.size(); ++k) {
    CHECK(d[k].second.device().is_cpu());
    CHECK(d[k].second.dtype() == c[k].second.dtype());
    CHECK_MESSAGE(d[k].second.item() == c[k].second.item(), c[k].first);
  }
  // Loading writes the device state.
  auto loaded = c;
  loaded[0].second = scalar_tensor(8.0, TensorOptions(DType::f32));
  gpu_s.load_state_dict(loaded);
  CHECK(gpu_s.scale_value() == 8.0);
}

TEST_CASE("GradScaler on CUDA: one unscale launch set over many tensors finds an inf in any of them") {
  test::require_cuda();
  const std::vector<Shape> shapes = mixed_shapes();
  for (size_t bad : {size_t(0), size_t(7), size_t(57), shapes.size() - 1}) {
    CAPTURE(bad);
    Twins t(shapes, DType::f32, 101);
    t.set_grads(0);
    if (t.cpu[bad].grad().defined()) {
      Tensor g = planted(t.cpu[bad].grad(), t.cpu[bad].numel() - 1, -kInf);
      t.cpu[bad].set_grad(g);
      t.gpu[bad].set_grad(g.to(Device::cuda()));
    }
    optim::SGD cpu_opt(t.cpu, optim::SGDOptions(0.1)), gpu_opt(t.gpu, optim::SGDOptions(0.1));
    optim::GradScaler cpu_s, gpu_s;
    cpu_s.unscale_(cpu_opt);
    gpu_s.unscale_(gpu_opt);
    CHECK(cpu_s.found_inf());
    CHECK(gpu_s.found_inf());
    t.check_grads(1e-6, 1e-6, "unscaled");
    CHECK_FALSE(gpu_s.step(gpu_opt));
    gpu_s.update();
    CHECK(gpu_s.scale_value() == 32768.0);
  }
}

TEST_CASE("GradScaler::scale multiplies a CUDA loss by the device scale") {
  test::require_cuda();
  optim::GradScaler s(optim::GradScalerOptions().init_scale(256));
  Tensor w = cuda_leaf(test::random({4}, DType::f32, 111));
  Tensor loss = sum(mul(w, w));
  Tensor scaled = s.scale(loss);
  CHECK(scaled.device().is_cuda());
  CHECK(scaled.item() == doctest::Approx(loss.item() * 256).epsilon(1e-6));
  scaled.backward();
  std::vector<double> expected = test::values(w.detach());
  for (double& v : expected) v *= 2 * 256;  // d(256 * sum w^2)/dw
  test::check_close(w.grad(), expected, 1e-6, 1e-6, "scaled gradient");
}
