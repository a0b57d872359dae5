// The memory planner (parallel/memory_plan.h) against the CPU allocator on forked ranks: a small GPT
// trained by dist::Trainer at world 2-4 in every sharding mode (none, zero1, zero2, full with a unit
// per block; DDP with and without gradient_as_bucket_view), f32, bf16 autocast (the default policy)
// and the bf16 policy (Note [Master weights]: 16-bit parameters and gradients, f32 master weights),
// AdamW. With the bf16 policy the bytes after a step are also the ZeRO paper's model-state rule
// (DDP 2 + 2 + 12, ZeRO-1 2 + 2 + 12/N, ZeRO-2 2 + 14/N, FSDP 16/N) plus the buffers the plan names. Each rank's live bytes after the third step are within 10% of the plan's after_step(), and
// the third step's peak within 20% of its peak(). The plan is built from the live model's parameters
// and the GPT step formula (models/gpt_memory.h). Measured today: after a step within 0.1%, the peak
// +1.5% in f32 and -7% in bf16 (the formula's block transient, docs/sharding.md "The memory planner").
#include <cmath>
#include <cstdio>

#include <kiln/core/cpu_allocator.h>
#include <kiln/models/gpt_memory.h>
#include <kiln/parallel/memory_plan.h>
#include <kiln/parallel/trainer.h>

#include "models/small_gpt.h"
#include "parallel/ddp_fixtures.h"

using namespace kiln;
using namespace kiln::test;
using dist::Sharding;

namespace {

constexpr int64_t kBatch = 4, kSeq = 64;  // per rank

struct Bytes {
  double after_step = 0, peak = 0;
  dist::MemoryPlan plan;  // from the live model's parameters
};

struct Precision {
  DType amp = DType::f32;
  bool policy = false;      // the bf16 MixedPrecisionPolicy (amp bf16)
  bool reduce_f32 = false;  // ... with reduce_dtype f32
  dist::MixedPrecisionPolicy mixed() const {
    dist::MixedPrecisionPolicy p;
    if (policy) p.param_dtype(DType::bf16);
    if (reduce_f32) p.reduce_dtype(DType::f32);
    return p;
  }
  std::string name() const { return policy ? (reduce_f32 ? "bf16 policy, f32 reduce" : "bf16 policy") : dtype_name(amp); }
};

dist::MemoryPlan plan(const models::GPT& model, const models::GPTConfig& c, Sharding mode, Precision prec, int world,
                      bool views);

// Three Trainer steps on this rank; the live bytes after the third and its peak, above what was
// alive before the model was made.
Bytes measure(dist::ProcessGroup& pg, Sharding mode, Precision prec, const models::GPTConfig& c, bool views) {
  set_num_threads(1);  // up to four ranks on two cores
  Generator g(1 + uint64_t(pg.rank()));
  Tensor idx = randint(0, c.vocab_size, {kBatch, kSeq}, g);
  Tensor targets = randint(0, c.vocab_size, {kBatch, kSeq}, g);
  const double baseline = double(cpu_allocator_stats().allocated_bytes);
  Bytes out;
  auto model = std::make_shared<models::GPT>(models::GPTOptions(c).seed(5));
  auto opt = std::make_shared<optim::AdamW>(model->parameters(), optim::AdamWOptions(3e-4).weight_decay(0.1));
  dist::Trainer trainer(model, opt, test::borrow(pg),
                        dist::TrainerOptions().sharding(mode).amp(prec.amp).mixed_precision(prec.mixed()).log_every(0)
                            .ddp(dist::DDPOptions().gradient_as_bucket_view(views))
                            .fsdp(dist::FSDPOptions().wrap({"GPTBlock"})));
  out.plan = plan(*model, c, mode, prec, pg.size(), views);
  auto step = [&] { trainer.step([&](int) { return model->loss(idx, targets); }); };
  step();  // AdamW's state, DDP's bucket rebuild
  step();
  cpu_reset_peak_stats();
  step();
  out.after_step = double(cpu_allocator_stats().allocated_bytes) - baseline;
  out.peak = double(cpu_allocator_stats().peak_allocated_bytes) - baseline;
  return out;
}

dist::MemoryPlan plan(const models::GPT& model, const models::GPTConfig& c, Sharding mode, Precision prec, int world,
                      bool views) {
  models::GPTMemoryOptions o;
  o.autocast = prec.amp != DType::f32;
  o.fused_head = models::uses_fused_head(models::GPTFusedHead::automatic, Device::cpu());
  const models::GPTMemoryEstimate est = models::estimate_gpt_training_memory(c, kBatch, kSeq, o);
  dist::MemoryPlanModel m;
  for (const Tensor& p : model.parameters()) m.param_numels.push_back(p.numel());
  m.units = models::gpt_parameter_layout(c).blocks;
  m.step = {est.activations, est.weight_copies, est.head, est.head_transient, est.block_transient, est.end_transient};
  return dist::plan_memory(m, dist::MemoryPlanOptions().sharding(mode).world_size(world).gradient_as_bucket_view(views)
                                  .mixed_precision(prec.mixed()));
}

// The ZeRO paper's model states per parameter for `mode` at world n (16-bit parameters and
// gradients, K = 12), plus the buffers the plan names beside them (DDP's buckets hold ZeRO-1's and
// DDP's 16-bit gradients: the rule's "2 of gradients" is those buckets).
double paper_rule_bytes(Sharding mode, int n, double params, const dist::MemoryPlan& plan) {
  const dist::ZeroStage stage = mode == Sharding::none    ? dist::ZeroStage::baseline
                                : mode == Sharding::zero1 ? dist::ZeroStage::os
                                : mode == Sharding::zero2 ? dist::ZeroStage::os_g
                                                          : dist::ZeroStage::os_g_p;
  const double rule = dist::zero_model_states_bytes(params, stage, n);
  const bool buckets_are_the_gradients = mode == Sharding::none || mode == Sharding::zero1;
  return rule + (buckets_are_the_gradients ? 0.0 : double(plan.buckets));
}

void check_modes(std::initializer_list<Sharding> modes, bool views = false,
                 std::initializer_list<Precision> precisions = {{DType::f32}, {DType::bf16}}) {
  // Nothing threaded runs in the parent before the fork (the ranks' thread pools would inherit a
  // dead one): each rank plans from its own model.
  const models::GPTConfig c = small_gpt();
  const double params = double(models::GPT::count_parameters(c));
  for (int n : {2, 3, 4})
    for (Precision prec : precisions)
      for (Sharding mode : modes) {
        CAPTURE(n);
        run_ranks(n, [&](dist::ProcessGroup& pg) {
          const Bytes got = measure(pg, mode, prec, c, views);
          const dist::MemoryPlan& want = got.plan;
          const std::string what = std::string(dist::sharding_name(mode)) + (views ? " (bucket views)" : "") + " " +
                                   prec.name() + " world " +
                                   std::to_string(n) + " rank " + std::to_string(pg.rank()) + ": after a step " +
                                   std::to_string(got.after_step / params) + " B/param (plan " +
                                   std::to_string(double(want.after_step()) / params) + "), peak " +
                                   std::to_string(got.peak / params) + " (plan " +
                                   std::to_string(double(want.peak()) / params) + ")";
          if (pg.rank() == 0) std::printf("%s\n", what.c_str());
          expect(std::fabs(got.after_step - double(want.after_step())) <= 0.10 * double(want.after_step()),
                 what + ": after a step beyond 10%");
          expect(std::fabs(got.peak - double(want.peak())) <= 0.20 * double(want.peak()), what + ": peak beyond 20%");
          if (prec.policy && !prec.reduce_f32) {
            const double rule = paper_rule_bytes(mode, n, params, want);
            expect(std::fabs(got.after_step - rule) <= 0.10 * rule,
                   what + ": beyond 10% of the ZeRO paper's rule, " + std::to_string(rule / params) + " B/param");
          }
        });
      }
}

}  // namespace

TEST_CASE("the planner matches the allocator on forked ranks: DDP and ZeRO-1 at world 2-4, f32 and bf16") {
  check_modes({Sharding::none, Sharding::zero1});
}

TEST_CASE("the planner matches the allocator on forked ranks: ZeRO-2 and FSDP at world 2-4, f32 and bf16") {
  check_modes({Sharding::zero2, Sharding::full});
}

TEST_CASE("the planner matches the allocator on forked ranks: DDP and ZeRO-1 with gradient_as_bucket_view") {
  check_modes({Sharding::none, Sharding::zero1}, /*views=*/true);  // .grad is the bucket: no second copy
}

TEST_CASE("the bf16 policy at world 2-4: the planner and the ZeRO paper's rule match the allocator, every mode") {
  check_modes({Sharding::none, Sharding::zero1, Sharding::zero2, Sharding::full}, false, {{DType::bf16, true}});
}

TEST_CASE("the bf16 policy with f32 reductions at world 2-4: ZeRO-2's and FSDP's f32 gradient shard, as planned") {
  check_modes({Sharding::zero2, Sharding::full}, false, {{DType::bf16, true, true}});
}
