// ZeRO-1 (ShardedOptimizer over DDP) and ZeRO-2 (ShardedOptimizer + ShardedReducer) against DDP on
// 1 to 4 ranks: 20 AdamW steps, accumulation 2, 99 parameters (no world size divides them), f32 and
// bf16 autocast, with and without clipping. Losses and final weights agree within 1e-6 relative
// (weights: of the element plus of the largest weight, zero_fixtures.h compare_with_ddp),
// and bitwise where the reduction order is the same (ZeRO-1 always: DDP's all-reduce feeds it;
// ZeRO-2 at world 1 and 2, where the ring's sum is the all-reduce's a + b).
#include "parallel/zero_fixtures.h"

using namespace kiln;
using namespace kiln::test;

namespace {

void check_modes(dist::ProcessGroup& pg, const ZeroSpec& spec) {
  const ZeroRun ddp = train_mode(pg, Mode::ddp, spec);
  const std::string at = " at world " + std::to_string(pg.size()) + " rank " + std::to_string(pg.rank()) +
                         (spec.amp == DType::bf16 ? " bf16" : " f32") + (spec.clip > 0 ? " clip" : "");
  const bool exact = spec.clip == 0;
  compare_with_ddp(train_mode(pg, Mode::zero1, spec), ddp, exact, std::string("zero1") + at);
  compare_with_ddp(train_mode(pg, Mode::zero2, spec), ddp, exact && pg.size() <= 2, std::string("zero2") + at);
}

}  // namespace

TEST_CASE("ZeRO-1 and ZeRO-2 equal DDP: f32, accumulation 2, world 1 to 4") {
  run_worlds({1, 2, 3, 4}, [](dist::ProcessGroup& pg) { check_modes(pg, ZeroSpec{}); });
}

TEST_CASE("ZeRO-1 and ZeRO-2 equal DDP: bf16 autocast, world 1 to 4") {
  run_worlds({1, 2, 3, 4}, [](dist::ProcessGroup& pg) { check_modes(pg, ZeroSpec{.amp = DType::bf16}); });
}

TEST_CASE("ZeRO-1 and ZeRO-2 clip by the global norm across shards like DDP + clip_grad_norm") {
  // 0.05: small enough to clip every step.
  run_worlds({1, 3}, [](dist::ProcessGroup& pg) { check_modes(pg, ZeroSpec{.clip = 0.05}); });
}

TEST_CASE("ZeRO-2 keeps only the gradient shard: .grad is released and local_grad holds the average") {
  run_ranks(3, [](dist::ProcessGroup& pg) {
    auto group = test::borrow(pg);
    auto net = std::make_shared<Net>(seed_for_rank(0), NetSpec{5, 6, 3});
    auto sharded = dist::ShardedOptimizer::make<optim::AdamW>(net->parameters(), group, optim::AdamWOptions(), small_shards());
    auto reducer = dist::ShardedReducer::create(sharded, net);
    TrainSpec rows;
    rows.net = NetSpec{5, 6, 3};
    auto [x, y] = batch_rows(rows, 0, pg.rank() * 4, 4, 12);
    mse_loss(net->forward(x), y).backward();
    // Every bucket's reduce-scatter was launched from the gradient hooks, during backward, in
    // bucket order: before finish() is called.
    const size_t buckets = sharded->layout().buckets().size();
    expect(buckets >= 2, "the test net spreads over several buckets");
    expect(reducer->reduce_scatters_total() == int64_t(buckets), "one reduce_scatter per bucket during backward");
    for (size_t b = 0; b < buckets; ++b) expect(reducer->launch_order()[b] == b, "buckets launch in order");
    reducer->finish();
    for (const Tensor& p : net->parameters()) expect(!p.grad().defined(), "a full .grad survived the backward");
    // The oracle: the full-batch gradient on one process, sliced to this rank's pieces.
    auto ref = std::make_shared<Net>(seed_for_rank(0), NetSpec{5, 6, 3});
    auto [xa, ya] = batch_rows(rows, 0, 0, 12, 12);
    mse_loss(ref->forward(xa), ya).backward();
    std::vector<double> local = values(sharded->local_grad());
    auto params = ref->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& piece = sharded->layout().piece(i);
      std::vector<double> g = values(params[i].grad());
      for (int64_t e = piece.begin; e < piece.end; ++e) {
        const double want = g[size_t(e)] ;
        const double have = local[size_t(piece.local_offset + e - piece.begin)];
        // mse_loss is a mean: the per-rank loss averages 4 rows, the reference 12; DDP's average
        // of the ranks' gradients is the reference's gradient.
        expect(std::fabs(have - want) <= 1e-5 * (std::fabs(want) + 1e-3),
               "parameter " + std::to_string(i) + " element " + std::to_string(e) + ": " + std::to_string(have) +
                   " vs " + std::to_string(want));
      }
    }
  });
}
