// train_gpt --fit-memory's chooser (apps/gpt/fit_memory.h), with no training: the largest micro-batch
// whose planned peak fits, recompute only where no plain step fits, a clear error when nothing does,
// the global batch kept; and Note [Accumulated gradients] against the CPU allocator (one process,
// accumulating two micro-batches: what tests/parallel's allocator checks, at one micro-step, leave out).
#include "test_util.h"

#include <kiln/core/cpu_allocator.h>

#include "gpt/fit_memory.h"
#include "models/small_gpt.h"

using namespace kiln;
using kiln::test::small_gpt;
using apps::FitMemoryOptions;
using apps::FitMemoryPlan;
using models::GPTRecompute;

namespace {

FitMemoryOptions options(int64_t global_batch, int world = 1, dist::Sharding mode = dist::Sharding::none) {
  return FitMemoryOptions()
      .config(small_gpt())
      .global_batch(global_batch)
      .seq_len(64)
      .fused_head(true)  // the CPU's default
      .plan(dist::MemoryPlanOptions().sharding(mode).world_size(world));
}

}  // namespace

TEST_CASE("the largest micro-batch whose peak fits, with the accumulation that keeps the global batch") {
  FitMemoryOptions o = options(8).recompute_modes({GPTRecompute::none});
  const FitMemoryPlan p8 = apps::plan_gpt_step(o, 8, GPTRecompute::none);
  const FitMemoryPlan p4 = apps::plan_gpt_step(o, 4, GPTRecompute::none);
  const FitMemoryPlan p2 = apps::plan_gpt_step(o, 2, GPTRecompute::none);
  REQUIRE(p8.peak > p4.peak);
  REQUIRE(p4.peak > p2.peak);
  CHECK(p8.grad_accum == 1);
  CHECK(p8.accumulated_gradients == 0);
  CHECK(p4.grad_accum == 2);
  CHECK(p4.accumulated_gradients == p4.memory.full_gradients);  // DDP-style .grad kept across micro-steps
  CHECK(p4.accumulated_gradients > 0);

  FitMemoryPlan got = apps::fit_gpt_memory(o.budget_bytes(p8.peak));  // exactly the peak fits
  CHECK(got.micro_batch == 8);
  CHECK(got.grad_accum == 1);
  got = apps::fit_gpt_memory(o.budget_bytes((p8.peak + p4.peak) / 2));
  CHECK(got.micro_batch == 4);
  CHECK(got.grad_accum == 2);
  CHECK(got.peak == p4.peak);
  got = apps::fit_gpt_memory(o.budget_bytes(p4.peak - 1));
  CHECK(got.micro_batch == 2);
  CHECK(got.grad_accum == 4);
  // Micro-batches divide the per-rank batch: 6 sequences give 6, 3, 2, 1, never 4 or 5.
  FitMemoryOptions six = options(6).recompute_modes({GPTRecompute::none});
  const FitMemoryPlan p6 = apps::plan_gpt_step(six, 6, GPTRecompute::none);
  const FitMemoryPlan p3 = apps::plan_gpt_step(six, 3, GPTRecompute::none);
  got = apps::fit_gpt_memory(six.budget_bytes(p6.peak - 1));
  CHECK(got.micro_batch == 3);
  CHECK(got.grad_accum == 2);
  CHECK(p3.peak <= p6.peak - 1);
  CHECK_ERROR_CONTAINS(apps::plan_gpt_step(six, 4, GPTRecompute::none), "micro-batch 4 does not divide");
}

TEST_CASE("recompute only when no plain step of that micro-batch fits, the cheapest that does") {
  FitMemoryOptions o = options(8);
  const std::vector<GPTRecompute> order = apps::recompute_modes_by_cost(small_gpt(), 64);
  REQUIRE(order.size() == 4);
  CHECK(order.front() == GPTRecompute::none);
  CHECK(order.back() == GPTRecompute::block);
  const FitMemoryPlan plain = apps::plan_gpt_step(o, 8, GPTRecompute::none);
  const FitMemoryPlan block = apps::plan_gpt_step(o, 8, GPTRecompute::block);
  REQUIRE(block.peak < plain.peak);
  // Just under the plain step: the first mode in cost order that fits, at the same micro-batch.
  FitMemoryPlan got = apps::fit_gpt_memory(o.budget_bytes(plain.peak - 1));
  CHECK(got.micro_batch == 8);
  CHECK(got.grad_accum == 1);
  CHECK(got.recompute != GPTRecompute::none);
  for (GPTRecompute mode : order) {
    if (mode == got.recompute) break;
    CHECK(apps::plan_gpt_step(o, 8, mode).peak > plain.peak - 1);  // every cheaper mode was over
  }
  // Where only block fits at 8, block it is (partial modes save less here).
  int64_t partial = 0;
  for (GPTRecompute mode : {GPTRecompute::attention, GPTRecompute::mlp})
    partial = std::min(partial == 0 ? INT64_MAX : partial, apps::plan_gpt_step(o, 8, mode).peak);
  REQUIRE(block.peak < partial);
  got = apps::fit_gpt_memory(o.budget_bytes(block.peak));
  CHECK(got.micro_batch == 8);
  CHECK(got.recompute == GPTRecompute::block);
  // --recompute given fixes the mode: without recompute the micro-batch shrinks instead.
  got = apps::fit_gpt_memory(FitMemoryOptions(o).recompute_modes({GPTRecompute::none}).budget_bytes(block.peak));
  CHECK(got.recompute == GPTRecompute::none);
  CHECK(got.micro_batch < 8);
  // T long against C: attention's T-long products make it dearer than the MLP.
  CHECK(apps::recompute_modes_by_cost(small_gpt(), 1024)[1] == GPTRecompute::mlp);
  CHECK(apps::recompute_modes_by_cost(small_gpt(), 64)[1] == GPTRecompute::attention);
}

TEST_CASE("nothing fits: the error names the smallest peak and the plan that gives it") {
  FitMemoryOptions o = options(8);
  int64_t smallest = INT64_MAX;
  for (int64_t b : {1, 2, 4, 8})
    for (GPTRecompute mode : apps::recompute_modes_by_cost(small_gpt(), 64))
      smallest = std::min(smallest, apps::plan_gpt_step(o, b, mode).peak);
  const FitMemoryPlan best = apps::plan_gpt_step(o, 1, GPTRecompute::block);
  CHECK(best.peak == smallest);  // one sequence, block recompute: the least this run can hold
  char mib[80];
  std::snprintf(mib, sizeof mib, "the smallest predicted peak per rank is %.1f MiB",
                double(smallest) / double(1 << 20));
  CHECK_ERROR_CONTAINS(apps::fit_gpt_memory(o.budget_bytes(smallest - 1)), "no plan for 8 sequences per step",
                       static_cast<const char*>(mib), "(micro-batch 1, grad accum 8, recompute block)",
                       "--sharding zero2 or full");
  CHECK(apps::fit_gpt_memory(o.budget_bytes(smallest)).micro_batch == 1);
}

TEST_CASE("sharded ranks: the per-rank batch is split, the mode's terms are planned") {
  // 16 sequences over 4 ranks: micro-batches of 4, 2, 1 per rank; the global batch stays 16.
  for (dist::Sharding mode :
       {dist::Sharding::none, dist::Sharding::zero1, dist::Sharding::zero2, dist::Sharding::full}) {
    CAPTURE(dist::sharding_name(mode));
    FitMemoryOptions o = options(16, 4, mode).recompute_modes({GPTRecompute::none});
    const FitMemoryPlan p4 = apps::plan_gpt_step(o, 4, GPTRecompute::none);
    const FitMemoryPlan p2 = apps::plan_gpt_step(o, 2, GPTRecompute::none);
    const FitMemoryPlan got = apps::fit_gpt_memory(o.budget_bytes(p4.peak - 1));
    CHECK(got.micro_batch == 2);
    CHECK(got.micro_batch * got.grad_accum * 4 == 16);
    CHECK(got.peak == p2.peak);
    // Accumulating holds a full gradient of every parameter in every mode.
    CHECK(p2.accumulated_gradients == 4 * models::GPT::count_parameters(small_gpt()));
  }
  // The sharded modes hold less than DDP at the same micro-batch.
  const auto peak = [](dist::Sharding mode) {
    return apps::plan_gpt_step(options(16, 4, mode), 4, GPTRecompute::none).memory.after_step();
  };
  CHECK(peak(dist::Sharding::full) < peak(dist::Sharding::zero2));
  CHECK(peak(dist::Sharding::zero2) < peak(dist::Sharding::zero1));
  CHECK(peak(dist::Sharding::zero1) < peak(dist::Sharding::none));
  CHECK_ERROR_CONTAINS(apps::fit_gpt_memory(options(6, 4).budget_bytes(int64_t(1) << 40)),
                       "global batch of 6 sequences does not split over 4 ranks");
}

TEST_CASE("the printed plan: micro-batch, accumulation, recompute, the peak against the budget, the terms") {
  FitMemoryOptions o = options(8).recompute_modes({GPTRecompute::none});
  const FitMemoryPlan p4 = apps::plan_gpt_step(o, 4, GPTRecompute::none);
  o.budget_bytes(p4.peak);
  const std::string text = apps::describe_fit(apps::fit_gpt_memory(o), o);
  for (const char* part : {"micro-batch 4 x grad accum 2 x world 1 = 8 sequences per step, recompute none",
                           "predicted peak per rank", "at the start of backward", "sharding none",
                           "by term (each at its largest): activations ", "optimizer states",
                           "accumulated gradients 471.0 KiB"})
    CHECK_MESSAGE(text.find(part) != std::string::npos, text, " lacks ", std::string(part));
}

// Note [Accumulated gradients] on the CPU allocator: one process trains the small GPT with B 4 and
// with 2 micro-batches of 4; each third step's peak within 20% of the plan's (as the planner's own
// checks), and the accumulation's extra within 25% of the gradients' bytes the plan adds for it.
TEST_CASE("the accumulation term against the CPU allocator") {
  set_num_threads(1);
  const models::GPTConfig c = small_gpt();
  auto measure = [&](int accum) {
    Generator g(7);
    Tensor idx = randint(0, c.vocab_size, {4, 64}, g);
    Tensor targets = randint(0, c.vocab_size, {4, 64}, g);
    const double baseline = double(cpu_allocator_stats().allocated_bytes);
    auto model = std::make_shared<models::GPT>(models::GPTOptions(c).seed(5));
    auto opt = std::make_shared<optim::AdamW>(model->parameters(), optim::AdamWOptions(3e-4).weight_decay(0.1));
    dist::Trainer trainer(model, opt, nullptr, dist::TrainerOptions().grad_accum_steps(accum).log_every(0));
    auto step = [&] { trainer.step([&](int) { return model->loss(idx, targets); }); };
    step();  // AdamW's state
    step();
    cpu_reset_peak_stats();
    step();
    return double(cpu_allocator_stats().peak_allocated_bytes) - baseline;
  };
  const double one = measure(1), two = measure(2);
  const FitMemoryPlan plan_one = apps::plan_gpt_step(options(4), 4, GPTRecompute::none);
  const FitMemoryPlan plan_two = apps::plan_gpt_step(options(8), 4, GPTRecompute::none);
  MESSAGE("peak with B 4: measured ", one, " bytes, plan ", plan_one.peak, "; 2 x 4 accumulated: measured ", two,
          ", plan ", plan_two.peak, " (accumulated gradients ", plan_two.accumulated_gradients, ")");
  CHECK(std::fabs(one - double(plan_one.peak)) <= 0.20 * double(plan_one.peak));
  CHECK(std::fabs(two - double(plan_two.peak)) <= 0.20 * double(plan_two.peak));
  const double extra = two - one, want = double(plan_two.peak - plan_one.peak);
  CHECK(want == double(plan_two.accumulated_gradients));
  CHECK(std::fabs(extra - want) <= 0.25 * want);
}
