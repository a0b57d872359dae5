// Shared pieces of the sharded data parallel tests: one rank's training loop in every mode (DDP,
// ZeRO-1, ZeRO-2) over the DDP tests' Net with parameter counts that no world size divides, so the
// modes can be compared with each other inside one rank.
#pragma once

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

inline ZeroRun train_mode(dist::ProcessGroup& pg, Mode mode, const ZeroSpec& s) {
  auto group = std::shared_ptr<dist::ProcessGroup>(&pg, [](dist::ProcessGroup*) {});
  auto net = std::make_shared<Net>(seed_for_rank(pg.rank()), s.net);  // rank 0's broadcast must win
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::shared_ptr<optim::Optimizer> opt;
  std::shared_ptr<dist::ShardedOptimizer> sharded;
  std::shared_ptr<dist::ShardedReducer> reducer;
  const auto adamw = optim::AdamWOptions(1e-2).weight_decay(0.1);
  if (mode != Mode::zero2) ddp = std::make_unique<dist::DistributedDataParallel>(net, group, small_buckets());
  if (mode == Mode::ddp) {
    opt = std::make_shared<optim::AdamW>(net->parameters(), adamw);
  } else {
    sharded = dist::ShardedOptimizer::make<optim::AdamW>(net->parameters(), group, adamw, small_shards());
    opt = sharded;
    if (mode == Mode::zero2) reducer = dist::ShardedReducer::create(sharded, net);
  }
  const int world = pg.size();
  const int64_t total = world * s.batch * s.accum;
  TrainSpec rows;
  rows.net = s.net;
  ZeroRun run;
  for (int step = 0; step < s.steps; ++step) {
    double loss_sum = 0;
    for (int m = 0; m < s.accum; ++m) {
      auto [x, y] = batch_rows(rows, step, (int64_t(m) * world + pg.rank()) * s.batch, s.batch, total);
      const bool sync = m + 1 == s.accum;
      if (ddp) ddp->set_require_backward_grad_sync(sync);
      if (reducer) reducer->set_require_backward_grad_sync(sync);
      Tensor loss;
      {
        AutocastGuard autocast(s.amp == DType::f32 ? DType::bf16 : s.amp, s.amp != DType::f32);
        loss = mse_loss(net->forward(x), y).to(DType::f32);
      }
      (loss * (1.0 / s.accum)).backward();
      loss_sum += loss.item();
    }
    if (ddp) ddp->finish_gradient_synchronization();
    if (reducer) reducer->finish();
    if (s.clip > 0) {
      if (sharded)
        sharded->clip_grad_norm(s.clip);
      else
        optim::clip_grad_norm(net->parameters(), s.clip);
    }
    opt->step();
    opt->zero_grad();
    run.losses.push_back(loss_sum);
  }
  run.weights = flat_parameters(*net);
  return run;
}

}  // namespace kiln::test
