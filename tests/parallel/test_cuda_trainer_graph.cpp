// The whole-step CUDA graph on a GPU (Note [Whole-step CUDA graph]): a Trainer that warms up,
// captures and replays takes the eager Trainer's steps (losses, norms, skips and final weights) under
// a schedule that changes the learning rate every step, with accumulation and clipping, in f32,
// bf16 and f16 (GradScaler on the device); replayed steps that are not log steps make no host sync;
// a capture that cannot be made (dropout's generator) fails with a message and leaves no state.
#include "test_util.h"

#include <cmath>
#include <memory>

#include <kiln/parallel/trainer.h>

#include "parallel/ddp_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using kiln::test::flat_parameters;
using kiln::test::Net;
using kiln::test::NetSpec;

namespace {

constexpr int kMicro = 2, kSteps = 9, kWarmup = 2;

struct Run {
  std::shared_ptr<Net> net;
  std::unique_ptr<Trainer> trainer;
  std::vector<Tensor> x, y, scale;  // static inputs, one per micro-step
  std::vector<std::vector<Tensor>> bx, by, bscale;  // every step's batches, uploaded up front (no sync later)
};

Run make_run(DType amp, bool graph, int log_every) {
  Run r;
  r.net = std::make_shared<Net>(7, NetSpec{});
  r.net->to(Device::cuda());
  auto opt = std::make_shared<optim::AdamW>(r.net->parameters(), optim::AdamWOptions(2e-2).weight_decay(0.1));
  r.trainer = std::make_unique<Trainer>(
      r.net, opt, nullptr,
      TrainerOptions().amp(amp).grad_accum_steps(kMicro).clip_grad_norm(0.5).log_every(log_every)
          .cuda_graph(graph).cuda_graph_warmup(kWarmup).grad_scaler(optim::GradScalerOptions().init_scale(1024)),
      optim::warmup_cosine_schedule(optim::WarmupCosineOptions(3, kSteps).min_factor(0.1)));
  for (int m = 0; m < kMicro; ++m) {
    r.x.push_back(empty({4, 6}, DType::f32, Device::cuda()));
    r.y.push_back(empty({4, 4}, DType::f32, Device::cuda()));
    r.scale.push_back(empty({}, DType::f32, Device::cuda()));
  }
  for (int s = 0; s < kSteps; ++s) {
    r.bx.emplace_back();
    r.by.emplace_back();
    r.bscale.emplace_back();
    for (int m = 0; m < kMicro; ++m) {
      // Step 4's second micro-step overflows f16 (the step is skipped). The factor is a static input
      // like the batch: a branch on the host inside micro_loss would be frozen at the capture (the
      // first H200 run, 2026-11-28, replayed step 2's loss at step 4 when the test branched on s).
      r.bscale[s].push_back(full({}, s == 4 && m == 1 ? 1e30 : 1.0, DType::f32).to(Device::cuda()));
      r.bx[s].push_back(test::random({4, 6}, DType::f32, 1000 + 10 * uint64_t(s) + m).to(Device::cuda()));
      r.by[s].push_back(test::random({4, 4}, DType::f32, 2000 + 10 * uint64_t(s) + m).to(Device::cuda()));
    }
  }
  return r;
}

StepStats step(Run& r, int s) {
  for (int m = 0; m < kMicro; ++m) {  // this step's batch into the static inputs
    r.x[m].copy_(r.bx[s][m]);
    r.y[m].copy_(r.by[s][m]);
    r.scale[m].copy_(r.bscale[s][m]);
  }
  return r.trainer->step([&](int m) { return mse_loss(r.net->forward(r.x[m]), r.y[m]) * r.scale[m]; });
}

// Equal to 1e-6, or both NaN.
bool same(double a, double b) { return std::isnan(a) ? std::isnan(b) : a == doctest::Approx(b).epsilon(1e-6); }

}  // namespace

TEST_CASE("a captured and replayed step is the eager step: losses, norms, skips, weights") {
  test::require_cuda();
  for (DType amp : {DType::f32, DType::bf16, DType::f16}) {
    CAPTURE(amp);
    Run eager = make_run(amp, false, 1), graphed = make_run(amp, true, 1);
    for (int s = 0; s < kSteps; ++s) {
      CAPTURE(s);
      const StepStats e = step(eager, s), g = step(graphed, s);
      CHECK(g.lr == e.lr);
      CHECK(same(g.loss, e.loss));
      CHECK(same(g.grad_norm, e.grad_norm));  // f16's overflowed step: NaN on both sides
      CHECK(g.skipped == e.skipped);
      CHECK(graphed.trainer->graph_captured() == (s >= kWarmup));
    }
    CHECK(graphed.trainer->graph_replays() == kSteps - kWarmup);
    if (amp == DType::f16) CHECK(graphed.trainer->grad_scaler().scale_value() == eager.trainer->grad_scaler().scale_value());
    const auto pe = flat_parameters(*eager.net), pg = flat_parameters(*graphed.net);
    REQUIRE(pe.size() == pg.size());
    double worst = 0;
    for (size_t i = 0; i < pe.size(); ++i) worst = std::max(worst, std::fabs(pe[i] - pg[i]) / (std::fabs(pe[i]) + 0.01));
    CHECK(worst < 1e-6);
  }
}

TEST_CASE("replayed steps that are not log steps never wait for the device") {
  test::require_cuda();
  Run r = make_run(DType::bf16, true, 0);
  for (int s = 0; s < kWarmup + 1; ++s) step(r, s);  // warm-up and the capture
  REQUIRE(r.trainer->graph_captured());
  const int64_t syncs = cuda::host_sync_count();
  for (int s = kWarmup + 1; s < kSteps; ++s) step(r, s);
  CHECK(cuda::host_sync_count() == syncs);
  CHECK(r.trainer->graph_replays() == kSteps - kWarmup);
}

TEST_CASE("a capture that cannot be made (dropout) fails naming why, and the Trainer warms up again") {
  test::require_cuda();
  models::GPTConfig c = models::gpt_config("gpt-tiny");
  c.dropout = 0.1;
  auto model = std::make_shared<models::GPT>(models::GPTOptions(c).seed(1));
  model->to(Device::cuda());
  auto opt = std::make_shared<optim::AdamW>(model->parameters(), optim::AdamWOptions(1e-3));
  Trainer trainer(model, opt, nullptr, TrainerOptions().log_every(0).cuda_graph(true).cuda_graph_warmup(1));
  Generator g(5);
  Tensor idx = randint(0, c.vocab_size, {2, 32}, g).to(Device::cuda());
  Tensor tgt = randint(0, c.vocab_size, {2, 32}, g).to(Device::cuda());
  auto loss = [&](int) { return model->loss(idx, tgt); };
  trainer.step(loss);  // eager warm-up
  CHECK_THROWS_WITH_AS(trainer.step(loss), doctest::Contains("while capturing a CUDA graph"), Error);
  CHECK_FALSE(trainer.graph_captured());
  CHECK_FALSE(cuda::is_capturing());
  for (const Tensor& p : model->parameters()) CHECK_FALSE(p.grad().defined());
  trainer.step(loss);  // warms up again, eagerly
  CHECK_THROWS_AS(trainer.step(loss), Error);  // and the next capture fails the same way
  CHECK(trainer.global_step() == 2);           // only the two eager steps counted
}
