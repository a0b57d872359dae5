// Memory of the sharded modes, measured with the CPU allocator's live bytes (core/cpu_allocator.h)
// on every rank of 1-4 forked ranks: the state a rank keeps between backward and the step, and
// after the step, in bytes per parameter, against the formulas of Kiln's f32 parameters (no
// separate master copy; README "Sharded data parallel"):
//   DDP (gradient_as_bucket_view)  16            params 4 + grads (the buckets) 4 + AdamW m, v 8
//   ZeRO-1                         8 + 12 / N    params 4 + grads 4 + (m, v 8 + the owned chunk 4) / N
//   ZeRO-2                         4 + 16 / N    params 4 + (grad chunk 4 + m, v 8 + owned chunk 4) / N
// The same holds under bf16 autocast (casts are per op and transient). Prints the measured table.
#include "parallel/memory_fixtures.h"
#include "parallel/zero_fixtures.h"

using namespace kiln;
using namespace kiln::test;

namespace {

Measured measure(dist::ProcessGroup& pg, Mode mode, DType amp) {
  return measure_steps(pg, amp, [&](const std::shared_ptr<WideMlp>& net) {
    auto group = test::borrow(pg);
    const double caps_mb = 0.25;  // several buckets, so the transient gathers are a bucket or two
    std::shared_ptr<dist::DistributedDataParallel> ddp;
    std::shared_ptr<dist::ShardedOptimizer> sharded;
    std::shared_ptr<dist::ShardedReducer> reducer;
    MeasuredMode m;
    if (mode != Mode::zero2)
      ddp = std::make_shared<dist::DistributedDataParallel>(
          net, group, dist::DDPOptions().gradient_as_bucket_view(true).bucket_cap_mb(caps_mb).first_bucket_cap_mb(caps_mb));
    const auto shards = dist::ShardedOptimizerOptions().bucket_cap_mb(caps_mb).first_bucket_cap_mb(caps_mb);
    if (mode == Mode::ddp) {
      m.opt = std::make_shared<optim::AdamW>(net->parameters(), optim::AdamWOptions());
    } else {
      sharded = dist::ShardedOptimizer::make<optim::AdamW>(net->parameters(), group, optim::AdamWOptions(), shards);
      m.opt = sharded;
      if (mode == Mode::zero2) reducer = dist::ShardedReducer::create(sharded, net);
    }
    m.finish = [ddp, reducer] {
      if (ddp) ddp->finish_gradient_synchronization();
      if (reducer) reducer->finish();
    };
    return m;
  });
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
          expect_kept(m, want, describe(mode_name(mode), pg, m, want));
        });
      }
    }
  }
}
