// Memory of the sharded modes, measured with the CPU allocator's live bytes (core/cpu_allocator.h)
// on every rank of 1-4 forked ranks: the state a rank keeps between backward and the step, and
// after the step, in bytes per parameter, against the formulas of Kiln's f32 parameters (no
// separate master copy; README "Sharded data parallel"):
//   DDP (gradient_as_bucket_view)  16            params 4 + grads (the buckets) 4 + AdamW m, v 8
//   ZeRO-1                         8 + 12 / N    params 4 + grads 4 + (m, v 8 + the owned chunk 4) / N
//   ZeRO-2                         4 + 16 / N    params 4 + (grad chunk 4 + m, v 8 + owned chunk 4) / N
// The same holds under bf16 autocast (casts are per op and transient). Prints the measured table.
#include "parallel/zero_fixtures.h"

#include <kiln/core/cpu_allocator.h>

using namespace kiln;
using namespace kiln::test;

namespace {

constexpr int kLayers = 6;
constexpr int64_t kWidth = 192;  // 6 * (192 * 192 + 192) = 222336 parameters

struct Mlp : nn::Module {
  explicit Mlp(uint64_t seed) {
    Generator g(seed);
    for (int i = 0; i < kLayers; ++i)
      layers.push_back(register_module("l" + std::to_string(i),
                                       std::make_shared<nn::Linear>(nn::LinearOptions(kWidth, kWidth).generator(g))));
  }
  Tensor forward(Tensor x) {
    for (auto& l : layers) x = relu(l->forward(x));
    return x;
  }
  std::vector<std::shared_ptr<nn::Linear>> layers;
};

struct Measured {
  double before_step = 0, after_step = 0, peak = 0;  // bytes per parameter above the baseline
};

Measured measure(dist::ProcessGroup& pg, Mode mode, DType amp) {
  auto group = std::shared_ptr<dist::ProcessGroup>(&pg, [](dist::ProcessGroup*) {});
  Tensor x = random({4, kWidth}, DType::f32, 7 + pg.rank()), y = random({4, kWidth}, DType::f32, 8 + pg.rank());
  const size_t baseline = cpu_allocator_stats().allocated_bytes;
  Measured m;
  {
    auto net = std::make_shared<Mlp>(3);
    double params = 0;
    for (const Tensor& p : net->parameters()) params += double(p.numel());
    const double caps_mb = 0.25;  // several buckets, so the transient gathers are a bucket or two
    std::unique_ptr<dist::DistributedDataParallel> ddp;
    std::shared_ptr<optim::Optimizer> opt;
    std::shared_ptr<dist::ShardedOptimizer> sharded;
    std::shared_ptr<dist::ShardedReducer> reducer;
    if (mode != Mode::zero2)
      ddp = std::make_unique<dist::DistributedDataParallel>(
          net, group, dist::DDPOptions().gradient_as_bucket_view(true).bucket_cap_mb(caps_mb).first_bucket_cap_mb(caps_mb));
    const auto shards = dist::ShardedOptimizerOptions().bucket_cap_mb(caps_mb).first_bucket_cap_mb(caps_mb);
    if (mode == Mode::ddp) {
      opt = std::make_shared<optim::AdamW>(net->parameters(), optim::AdamWOptions());
    } else {
      sharded = dist::ShardedOptimizer::make<optim::AdamW>(net->parameters(), group, optim::AdamWOptions(), shards);
      opt = sharded;
      if (mode == Mode::zero2) reducer = dist::ShardedReducer::create(sharded, net);
    }
    auto per_param = [&](size_t bytes) { return (double(bytes) - double(baseline)) / params; };
    for (int step = 0; step < 3; ++step) {
      {
        AutocastGuard autocast(DType::bf16, amp == DType::bf16);
        mse_loss(net->forward(x), y).to(DType::f32).backward();
      }
      if (ddp) ddp->finish_gradient_synchronization();
      if (reducer) reducer->finish();
      m.before_step = per_param(cpu_allocator_stats().allocated_bytes);
      opt->step();
      opt->zero_grad();
      m.after_step = per_param(cpu_allocator_stats().allocated_bytes);
    }
    m.peak = per_param(cpu_allocator_stats().peak_allocated_bytes);
  }
  return m;
}

double formula(Mode mode, int world) {
  switch (mode) {
    case Mode::ddp: return 16;
    case Mode::zero1: return 8 + 12.0 / world;
    case Mode::zero2: return 4 + 16.0 / world;
  }
  return 0;
}

}  // namespace

TEST_CASE("bytes per parameter kept by DDP, ZeRO-1 and ZeRO-2 match the formulas at world 1 to 4") {
  // Each measurement in freshly forked ranks: nothing of an earlier mode is alive or cached.
  for (int n : {1, 2, 3, 4}) {
    for (DType amp : {DType::f32, DType::bf16}) {
      for (Mode mode : {Mode::ddp, Mode::zero1, Mode::zero2}) {
        CAPTURE(n);
        run_ranks(n, [&](dist::ProcessGroup& pg) {
          const Measured m = measure(pg, mode, amp);
          const double want = formula(mode, pg.size());
          if (pg.rank() == 0)
            std::printf("world %d %-5s %-4s: before step %.3f B/param (formula %.3f), after step %.3f, peak %.3f\n",
                        pg.size(), mode_name(mode), amp == DType::bf16 ? "bf16" : "f32", m.before_step, want,
                        m.after_step, m.peak);
          const std::string what = std::string(mode_name(mode)) + " at world " + std::to_string(pg.size()) + " rank " +
                                   std::to_string(pg.rank()) + ": " + std::to_string(m.before_step) + " B/param before "
                                   "the step, " + std::to_string(m.after_step) + " after, formula " + std::to_string(want);
          // Padding, 64-byte rounding and the small per-parameter tensors: within 3% + 0.1 B/param.
          expect(std::fabs(m.before_step - want) <= 0.03 * want + 0.1, what);
          expect(std::fabs(m.after_step - m.before_step) <= 0.1, what + ": the step changed what stays alive");
        });
      }
    }
  }
}
