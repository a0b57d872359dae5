// Shared pieces of the DDP tests: a three-layer MLP whose registration order and unused branch
// are configurable, its global batches, a single-process reference trainer (no DDP: the oracle)
// and the per-rank DDP trainer that takes its share of the same global batch.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kiln/parallel/ddp.h>

#include "parallel/run_ranks.h"

namespace kiln::test {

struct NetSpec {
  int64_t in = 6, hidden = 8, out = 4;
  bool shuffled = false;  // register fc3, fc1, fc2 (arrival order differs from reverse registration)
  bool unused = false;    // add 'spare', which forward never uses
};

// fc3(relu(fc2(relu(fc1(x))))). Weights are drawn from Generator(seed) in a fixed order, whatever
// the registration order, so two nets with the same seed and spec are identical.
struct Net : nn::Module {
  Net(uint64_t seed, const NetSpec& s) {
    Generator g(seed);
    fc1 = std::make_shared<nn::Linear>(nn::LinearOptions(s.in, s.hidden).generator(g));
    fc2 = std::make_shared<nn::Linear>(nn::LinearOptions(s.hidden, s.hidden).generator(g));
    fc3 = std::make_shared<nn::Linear>(nn::LinearOptions(s.hidden, s.out).generator(g));
    if (s.shuffled) {
      register_module("fc3", fc3);
      register_module("fc1", fc1);
      register_module("fc2", fc2);
    } else {
      register_module("fc1", fc1);
      register_module("fc2", fc2);
      register_module("fc3", fc3);
    }
    if (s.unused) spare = register_module("spare", std::make_shared<nn::Linear>(nn::LinearOptions(s.hidden, s.out).generator(g)));
  }
  Tensor forward(const Tensor& x) { return fc3->forward(relu(fc2->forward(relu(fc1->forward(x))))); }
  std::string name() const override { return "Net"; }
  std::shared_ptr<nn::Linear> fc1, fc2, fc3, spare;
};

inline uint64_t seed_for_rank(int rank) { return 100 + 17 * uint64_t(rank); }

// A non-owning handle on a rank's group (the group outlives everything the test builds on it).
inline std::shared_ptr<dist::ProcessGroup> borrow(dist::ProcessGroup& pg) { return {&pg, [](dist::ProcessGroup*) {}}; }

struct TrainSpec {
  NetSpec net;
  DType dtype = DType::f32;
  int steps = 5;
  int64_t batch = 4;  // rows per rank per micro-step
  int accum = 1;      // micro-steps per optimizer step (all but the last under no_sync)
};

// Rows [start, start + rows) of step `step`'s global batch: inputs and targets.
inline std::pair<Tensor, Tensor> batch_rows(const TrainSpec& s, int step, int64_t start, int64_t rows, int64_t total) {
  Tensor x = random({total, s.net.in}, s.dtype, 1000 + step);
  Tensor y = random({total, s.net.out}, s.dtype, 2000 + step);
  return {x.narrow(0, start, rows).contiguous(), y.narrow(0, start, rows).contiguous()};
}

inline std::vector<double> flat_parameters(const nn::Module& m) {
  std::vector<double> out;
  for (const Tensor& p : m.parameters()) {
    auto v = values(p);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// The oracle: one process, no DDP, rank 0's initial weights, the whole global batch per step.
inline std::vector<double> train_reference(const TrainSpec& s, int world) {
  auto net = std::make_shared<Net>(seed_for_rank(0), s.net);
  net->to(s.dtype);
  optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
  const int64_t total = world * s.batch * s.accum;
  for (int step = 0; step < s.steps; ++step) {
    opt.zero_grad();
    auto [x, y] = batch_rows(s, step, 0, total, total);
    mse_loss(net->forward(x), y).backward();
    opt.step();
  }
  return flat_parameters(*net);
}

// One rank's Net under DDP: seeded per rank (so rank 0's broadcast must win), in the spec's dtype.
struct DdpNet {
  DdpNet(dist::ProcessGroup& pg, const TrainSpec& s, const dist::DDPOptions& options)
      : net(make_net(pg, s)), ddp(net, borrow(pg), options) {}
  static std::shared_ptr<Net> make_net(dist::ProcessGroup& pg, const TrainSpec& s) {
    auto net = std::make_shared<Net>(seed_for_rank(pg.rank()), s.net);
    net->to(s.dtype);
    return net;
  }
  std::shared_ptr<Net> net;
  dist::DistributedDataParallel ddp;
};

// Called after each step's finish_gradient_synchronization(), before the optimizer step.
using StepCheck = std::function<void(dist::DistributedDataParallel&, int step)>;

// One rank's DDP training: a net seeded per rank (so rank 0's broadcast must win), micro-batch m
// of rank r is rows (m * world + r) * batch of the global batch, the loss is scaled by 1/accum.
inline std::vector<double> train_ddp(dist::ProcessGroup& pg, const TrainSpec& s, dist::DDPOptions options,
                                     const StepCheck& check = nullptr, dist::CommHook hook = nullptr) {
  DdpNet rank(pg, s, options);
  auto& [net, ddp] = rank;
  if (hook) ddp.register_comm_hook(hook);
  optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
  const int world = pg.size();
  const int64_t total = world * s.batch * s.accum;
  for (int step = 0; step < s.steps; ++step) {
    opt.zero_grad(/*set_to_none=*/false);
    for (int m = 0; m < s.accum; ++m) {
      auto [x, y] = batch_rows(s, step, (int64_t(m) * world + pg.rank()) * s.batch, s.batch, total);
      Tensor loss = mse_loss(ddp.forward<Net>(x), y) * (1.0 / s.accum);
      if (m + 1 < s.accum) {
        auto no_sync = ddp.no_sync();
        loss.backward();
      } else {
        loss.backward();
      }
    }
    ddp.finish_gradient_synchronization();
    if (check) check(ddp, step);
    opt.step();
  }
  return flat_parameters(*net);
}

// |a - e| <= rtol * (|e| + 0.01) everywhere (parameters are O(0.1..1)).
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                         const std::string& what) {
  expect(got.size() == want.size(), what + ": " + std::to_string(got.size()) + " values, expected " +
                                        std::to_string(want.size()));
  for (size_t i = 0; i < got.size(); ++i)
    expect(std::fabs(got[i] - want[i]) <= rtol * (std::fabs(want[i]) + 0.01),
           what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
               std::to_string(want[i]));
}

// The message of the kiln::Error that fn throws (fails when it throws nothing).
inline std::string error_of(const std::function<void()>& fn, const std::string& what) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  throw std::runtime_error(what + ": expected a kiln::Error, nothing was thrown");
}

inline void expect_contains(const std::string& message, const std::string& part, const std::string& what) {
  expect(message.find(part) != std::string::npos, what + ": message \"" + message + "\" lacks \"" + part + "\"");
}

// Small caps so the 6-parameter net spreads over several buckets.
inline dist::DDPOptions small_buckets() {
  return dist::DDPOptions().first_bucket_cap_mb(100.0 / (1 << 20)).bucket_cap_mb(200.0 / (1 << 20));
}

}  // namespace kiln::test
