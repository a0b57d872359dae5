// Shared pieces of the sharded data parallel tests: one rank's training loop in every mode (DDP,
// ZeRO-1, ZeRO-2) over the DDP tests' Net with parameter counts that no world size divides, so the
// modes can be compared with each other inside one rank.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <kiln/core/autocast.h>
#include <kiln/optim/adamw.h>
#include <kiln/parallel/sharded_optimizer.h>
#include <kiln/parallel/sharded_reducer.h>

#include "parallel/ddp_fixtures.h"

namespace kiln::test {

enum class Mode { ddp, zero1, zero2 };

inline const char* mode_name(Mode m) { return m == Mode::ddp ? "ddp" : m == Mode::zero1 ? "zero1" : "zero2"; }

struct ZeroSpec {
  NetSpec net{5, 6, 3};  // 36 + 42 + 21 = 99 parameters (30, 6, 36, 6, 18, 3)
  int steps = 20;
  int accum = 2;
  int64_t batch = 3;      // rows per rank per micro-step
  DType amp = DType::f32;  // bf16: autocast
  double clip = 0;        // 0: off
};

struct ZeroRun {
  std::vector<double> losses;   // this rank's loss per step (sum over micro-steps)
  std::vector<double> weights;  // final parameters, flat
};

// Bucket caps of 100 and 200 bytes: the 99 parameters spread over several padded buckets.
inline dist::ShardedOptimizerOptions small_shards() {
  return dist::ShardedOptimizerOptions().first_bucket_cap_mb(100.0 / (1 << 20)).bucket_cap_mb(200.0 / (1 << 20));
}

// |got - want| <= rtol * (|want| + atol_scale) everywhere; the message has the values in full.
inline void expect_rel(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                       double atol_scale, const std::string& what) {
  expect(got.size() == want.size(), what + ": sizes differ");
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) <= rtol * (std::fabs(want[i]) + atol_scale)) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf, ": element %zu is %.12g, expected %.12g (relative difference %.3g)", i, got[i],
                  want[i], std::fabs(got[i] - want[i]) / std::fabs(want[i]));
    expect(false, what + buf);
  }
}

// The weights and losses of `got` equal DDP's run `want`: within 1e-6 relative, the weights also
// within 1e-6 of the largest weight (a weight near zero differs by the f32 rounding of the larger
// ones' scale when the gradient sums were added in another order); bitwise when `bitwise`. The run
// must have trained: every weight moved away from rank 0's initial value.
inline void compare_with_ddp(const ZeroRun& got, const ZeroRun& want, bool bitwise, const std::string& what,
                             const NetSpec& net = ZeroSpec{}.net) {
  double scale = 0;
  for (double w : want.weights) scale = std::max(scale, std::fabs(w));
  expect_rel(got.losses, want.losses, 1e-6, 0.0, what + " losses");
  expect_rel(got.weights, want.weights, 1e-6, scale, what + " weights");
  if (bitwise) {
    expect(got.losses == want.losses, what + ": losses are not bitwise DDP's");
    expect(got.weights == want.weights, what + ": weights are not bitwise DDP's");
  }
  const std::vector<double> initial = flat_parameters(Net(seed_for_rank(0), net));
  for (size_t i = 0; i < initial.size(); ++i)
    expect(got.weights[i] != initial[i], what + ": weight " + std::to_string(i) + " never changed");
}

// What a data-parallel mode (DDP, ZeRO, FSDP) does at the points of the shared training loop.
struct ModeSteps {
  std::function<Tensor(const Tensor&)> forward;
  std::function<void(bool sync)> before_forward;  // each micro-step; sync: the last one of the step
  std::function<void()> finish;                   // after the last micro-step's backward
  std::function<void(double max_norm)> clip;
  std::shared_ptr<optim::Optimizer> opt;
  std::function<void(int step)> after_step;  // after the optimizer step, when given
};

// The loop every mode runs: rank r's micro-batch m of each step is rows (m * world + r) * batch of
// the global batch (on `device`), the loss is scaled by 1/accum, under bf16 autocast when s.amp is
// bf16; then finish, clipping (when s.clip > 0), the step and zero_grad. Returns this rank's loss
// per step (the sum over micro-steps).
inline std::vector<double> train_steps(dist::ProcessGroup& pg, const ZeroSpec& s, Device device, const ModeSteps& m) {
  const int world = pg.size();
  const int64_t total = world * s.batch * s.accum;
  TrainSpec rows;
  rows.net = s.net;
  std::vector<double> losses;
  for (int step = 0; step < s.steps; ++step) {
    double loss_sum = 0;
    for (int micro = 0; micro < s.accum; ++micro) {
      auto [x, y] = batch_rows(rows, step, (int64_t(micro) * world + pg.rank()) * s.batch, s.batch, total);
      x = x.to(device);
      y = y.to(device);
      m.before_forward(micro + 1 == s.accum);
      Tensor loss;
      {
        AutocastGuard autocast(s.amp == DType::f32 ? DType::bf16 : s.amp, s.amp != DType::f32);
        loss = mse_loss(m.forward(x), y).to(DType::f32);
      }
      (loss * (1.0 / s.accum)).backward();
      loss_sum += loss.item();
    }
    m.finish();
    if (s.clip > 0) m.clip(s.clip);
    m.opt->step();
    m.opt->zero_grad();
    if (m.after_step) m.after_step(step);
    losses.push_back(loss_sum);
  }
  return losses;
}

inline ZeroRun train_mode(dist::ProcessGroup& pg, Mode mode, const ZeroSpec& s) {
  auto group = test::borrow(pg);
  auto net = std::make_shared<Net>(seed_for_rank(pg.rank()), s.net);  // rank 0's broadcast must win
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::shared_ptr<dist::ShardedOptimizer> sharded;
  std::shared_ptr<dist::ShardedReducer> reducer;
  ModeSteps m;
  const auto adamw = optim::AdamWOptions(1e-2).weight_decay(0.1);
  if (mode != Mode::zero2) ddp = std::make_unique<dist::DistributedDataParallel>(net, group, small_buckets());
  if (mode == Mode::ddp) {
    m.opt = std::make_shared<optim::AdamW>(net->parameters(), adamw);
  } else {
    sharded = dist::ShardedOptimizer::make<optim::AdamW>(net->parameters(), group, adamw, small_shards());
    m.opt = sharded;
    if (mode == Mode::zero2) reducer = dist::ShardedReducer::create(sharded, net);
  }
  m.forward = [&](const Tensor& x) { return net->forward(x); };
  m.before_forward = [&](bool sync) {
    if (ddp) ddp->set_require_backward_grad_sync(sync);
    if (reducer) reducer->set_require_backward_grad_sync(sync);
  };
  m.finish = [&] {
    if (ddp) ddp->finish_gradient_synchronization();
    if (reducer) reducer->finish();
  };
  m.clip = [&](double max_norm) {
    if (sharded)
      sharded->clip_grad_norm(max_norm);
    else
      optim::clip_grad_norm(net->parameters(), max_norm);
  };
  ZeroRun run;
  run.losses = train_steps(pg, s, Device::cpu(), m);
  run.weights = flat_parameters(*net);
  return run;
}

}  // namespace kiln::test
