// The Trainer on one CUDA device (Note [Trainer host reads]): f16 with clipping takes the same
// steps as on the CPU (skips and scale backoff included) with found_inf and the norm kept on the
// device, and a step that is not a log step makes no host synchronization at all
// (cuda::host_sync_count), whatever the amp mode.
#include "test_util.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include <kiln/parallel/trainer.h>

#include "parallel/ddp_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using kiln::test::flat_parameters;
using kiln::test::Net;
using kiln::test::NetSpec;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Batch {
  Tensor x, y;
};

// Step `step`'s micro-batches (4 rows each) on `device`.
std::vector<Batch> batches(int step, int micro_steps, Device device) {
  std::vector<Batch> out;
  for (int m = 0; m < micro_steps; ++m)
    out.push_back({test::random({4, 6}, DType::f32, 1000 + 10 * uint64_t(step) + m).to(device),
                   test::random({4, 4}, DType::f32, 2000 + 10 * uint64_t(step) + m).to(device)});
  return out;
}

std::shared_ptr<Net> net_on(Device device) {
  auto net = std::make_shared<Net>(7, NetSpec{});
  net->to(device);
  return net;
}

}  // namespace

TEST_CASE("Trainer on CUDA, f16 + clipping + accumulation: the CPU's steps, skips and scale") {
  test::require_cuda();
  const int k = 2;
  auto poisoned = [](int step, int micro) { return (step == 2 && micro == 1) || step == 4; };
  auto make = [&](Device device, std::shared_ptr<Net>& net) {
    net = net_on(device);
    auto opt = std::make_shared<optim::SGD>(net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    return std::make_unique<Trainer>(net, opt, nullptr,
                                     TrainerOptions().amp(DType::f16).grad_accum_steps(k).clip_grad_norm(0.5)
                                         .log_every(1).grad_scaler(optim::GradScalerOptions().init_scale(1024)
                                                                       .growth_interval(3)));
  };
  std::shared_ptr<Net> cpu_net, gpu_net;
  auto cpu = make(Device::cpu(), cpu_net);
  auto gpu = make(Device::cuda(), gpu_net);
  for (int step = 0; step < 7; ++step) {
    CAPTURE(step);
    auto cb = batches(step, k, Device::cpu()), gb = batches(step, k, Device::cuda());
    auto loss_of = [&](Net& net, const std::vector<Batch>& b, int m) {
      Tensor loss = mse_loss(net.forward(b[m].x), b[m].y);
      return poisoned(step, m) ? loss * kInf : loss;
    };
    StepStats sc = cpu->step([&](int m) { return loss_of(*cpu_net, cb, m); });
    StepStats sg = gpu->step([&](int m) { return loss_of(*gpu_net, gb, m); });
    REQUIRE(sg.found_inf.defined());
    CHECK(sg.found_inf.device().is_cuda());
    CHECK(sg.grad_norm_tensor.device().is_cuda());
    CHECK(sg.skipped == sc.skipped);
    CHECK(sg.skipped == poisoned(step, 1));
    CHECK((sg.found_inf.item() != 0.0) == sg.skipped);
    if (sc.skipped) {
      CHECK_FALSE(std::isfinite(sg.grad_norm));
    } else {
      CHECK(sg.grad_norm == doctest::Approx(sc.grad_norm).epsilon(1e-2));
      CHECK(sg.loss == doctest::Approx(sc.loss).epsilon(1e-2));
    }
    CHECK(gpu->grad_scaler().scale_value() == cpu->grad_scaler().scale_value());
    CHECK(gpu->grad_scaler().growth_tracker() == cpu->grad_scaler().growth_tracker());
    test::check_close(flat_parameters(*gpu_net), flat_parameters(*cpu_net), 1e-2, 1e-3, "parameters");
  }
  CHECK(cpu->grad_scaler().scale_value() != 1024.0);  // backed off and grew back
}

TEST_CASE("Trainer on CUDA: a step that is not a log step makes no host sync (f16, bf16, f32; clipping on)") {
  test::require_cuda();
  for (DType amp : {DType::f16, DType::bf16, DType::f32}) {
    CAPTURE(dtype_name(amp));
    auto net = net_on(Device::cuda());
    auto opt = std::make_shared<optim::AdamW>(net->parameters(), optim::AdamWOptions(1e-3));
    Trainer t(net, opt, nullptr, TrainerOptions().amp(amp).grad_accum_steps(2).clip_grad_norm(1.0).log_every(4));
    std::vector<std::vector<Batch>> data;
    for (int step = 0; step < 6; ++step) data.push_back(batches(step, 2, Device::cuda()));
    auto run = [&](int step) {
      return t.step([&](int m) { return mse_loss(net->forward(data[step][m].x), data[step][m].y); });
    };
    run(0);  // a log step; also creates the optimizer state and moves the scaler to the device
    for (int step = 1; step < 4; ++step) {
      const int64_t before = cuda::host_sync_count();
      StepStats s = run(step);
      CHECK_MESSAGE(cuda::host_sync_count() == before, "step ", step, " synchronized ",
                    cuda::host_sync_count() - before, " time(s)");
      CHECK_FALSE(s.logged);
      CHECK(std::isnan(s.grad_norm));
    }
    const int64_t before = cuda::host_sync_count();
    StepStats s4 = run(4);  // the next log step reads the loss and the norm
    CHECK(s4.logged);
    CHECK(cuda::host_sync_count() > before);
    CHECK(std::isfinite(s4.grad_norm));
    CHECK(std::isfinite(s4.loss));
  }
}

TEST_CASE("Trainer on CUDA with gpt-tiny (embedding, attention, cross entropy): no host sync off log steps") {
  test::require_cuda();
  for (DType amp : {DType::bf16, DType::f32}) {
    CAPTURE(dtype_name(amp));
    auto gpt = std::make_shared<models::GPT>(models::gpt_config("gpt-tiny"));
    gpt->to(Device::cuda());
    auto opt = std::make_shared<optim::AdamW>(gpt->parameters(), optim::AdamWOptions(1e-3));
    Trainer t(gpt, opt, nullptr, TrainerOptions().amp(amp).grad_accum_steps(2).clip_grad_norm(1.0).log_every(3));
    // Token batches (B 2, T 32) on the device; some targets ignored (-1).
    std::vector<Tensor> xs, ys;
    for (int i = 0; i < 8; ++i) {
      xs.push_back(test::random({2, 32}, DType::i64, 50 + i, 0, 255).to(Device::cuda()));
      Tensor y = test::random({2, 32}, DType::i64, 70 + i, 0, 255);
      y.select(1, 5).fill_(-1);
      ys.push_back(y.to(Device::cuda()));
    }
    auto run = [&](int step) {
      return t.step([&](int m) { return gpt->loss(xs[2 * step + m], ys[2 * step + m]); });
    };
    const double first = run(0).loss;  // a log step
    for (int step = 1; step < 3; ++step) {
      const int64_t before = cuda::host_sync_count();
      run(step);
      CHECK_MESSAGE(cuda::host_sync_count() == before, "step ", step, " synchronized ",
                    cuda::host_sync_count() - before, " time(s)");
    }
    StepStats s3 = run(3);
    CHECK(s3.logged);
    CHECK(std::isfinite(s3.loss));
    CHECK(std::isfinite(first));
    CHECK(cuda::deferred_faults_pending() == 0);  // the log step's read looked at them
  }
}
