// The Trainer's sharding modes (TrainerOptions::sharding): none, zero1, zero2 and full (FSDP, one
// unit per Linear) take the same steps (bf16 autocast, accumulation, clipping, two parameter groups);
// checkpoints move between world sizes and modes: a sharded checkpoint written at world 3 resumes at
// world 2 and at world 1 (and a consolidated one under DDP) with the loss sequence of an
// uninterrupted run, from and into full mode too. f16 with the GradScaler (overflowing steps skipped
// on every rank alike) takes DDP's steps in every mode.
#include <cstdio>
#include <filesystem>

#include <kiln/parallel/sharded_checkpoint.h>
#include <kiln/parallel/trainer.h>

#include "parallel/temp_dir.h"
#include "parallel/values_file.h"
#include "parallel/fsdp_fixtures.h"

using namespace kiln;
using namespace kiln::dist;
using namespace kiln::test;

namespace {

constexpr int64_t kGlobalRows = 12;  // per micro-step over all ranks: every world size 1-4 divides it
constexpr int kAccum = 2;

struct Run {
  Sharding sharding = Sharding::none;
  DType amp = DType::f32;
  double clip = 0;
  int first_step = 0, last_step = 10;  // trains steps [first, last)
  std::string load, save;              // checkpoint to resume from / to write after last_step
  bool sharded_save = true;
  double init_scale = 65536.0;  // GradScaler, with amp f16
  int* skipped = nullptr;       // counts the skipped (overflowing) steps when set
};

// Trains `r` on this rank and returns the logged losses (averaged over ranks and micro-steps).
std::vector<double> train(ProcessGroup& pg, const Run& r, std::vector<double>* weights = nullptr) {
  auto group = test::borrow(pg);
  auto net = std::make_shared<FsdpNet>(seed_for_rank(pg.rank()), NetSpec{5, 6, 3});
  std::vector<Tensor> decay, no_decay;
  for (const auto& [name, p] : net->named_parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto opt = std::make_shared<optim::AdamW>(std::vector<optim::AdamW::Group>{
      {decay, optim::AdamWOptions(2e-2).weight_decay(0.1)}, {no_decay, optim::AdamWOptions(2e-2).weight_decay(0)}});
  Trainer trainer(net, opt, group,
                  TrainerOptions().sharding(r.sharding).amp(r.amp).clip_grad_norm(r.clip).grad_accum_steps(kAccum)
                      .log_every(1).sharded_checkpoints(r.sharded_save).ddp(small_buckets())
                      .fsdp(FSDPOptions().wrap({"Linear"}))
                      .grad_scaler(optim::GradScalerOptions().init_scale(r.init_scale).growth_interval(3)),
                  optim::warmup_cosine_schedule(optim::WarmupCosineOptions(2, 10)));
  if (!r.load.empty()) trainer.load_checkpoint(r.load);
  expect(trainer.global_step() == r.first_step, "resumed at the wrong step");
  expect((trainer.sharded_optimizer() != nullptr) == (r.sharding != Sharding::none), "sharded optimizer presence");
  expect((trainer.fsdp() != nullptr) == (r.sharding == Sharding::full), "FSDP presence");
  const int world = pg.size();
  const int64_t rows = kGlobalRows / world;
  TrainSpec spec;
  spec.net = NetSpec{5, 6, 3};
  std::vector<double> losses;
  for (int step = r.first_step; step < r.last_step; ++step) {
    StepStats s = trainer.step([&](int micro) {
      auto [x, y] = batch_rows(spec, step * 10 + micro, pg.rank() * rows, rows, kGlobalRows);
      return mse_loss(net->forward(x), y);
    });
    losses.push_back(s.loss);
    if (r.skipped && s.skipped) ++*r.skipped;
  }
  if (!r.save.empty()) trainer.save_checkpoint(r.save);
  if (weights) *weights = trainer.fsdp() ? fsdp_parameters(*trainer.fsdp()) : flat_parameters(*net);
  return losses;
}

void expect_same_losses(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  expect_rel(got, want, 1e-6, 0.0, what);
}

// Trains steps [0, last) of `sharding` on `world` ranks and writes the checkpoint `path` (a shard per
// rank and an index when `sharded`, else one full-state file).
void save_at(int world, Sharding sharding, int last, const std::string& path, bool sharded = true) {
  run_ranks(world, [&](ProcessGroup& pg) {
    Run r;
    r.sharding = sharding;
    r.last_step = last;
    r.save = path;
    r.sharded_save = sharded;
    train(pg, r);
  });
}

// The run resumed from `path` at step `first` under `sharding`.
Run resumed(Sharding sharding, int first, const std::string& path) {
  Run r;
  r.sharding = sharding;
  r.first_step = first;
  r.load = path;
  return r;
}

// Resumes `path` at step 5 under `sharding` on `world` ranks: the losses must be `tail`.
void expect_resumes(int world, Sharding sharding, const std::string& path, const std::vector<double>& tail,
                    const std::string& what) {
  CAPTURE(world);
  CAPTURE(sharding_name(sharding));
  run_ranks(world, [&](ProcessGroup& pg) {
    expect_same_losses(train(pg, resumed(sharding, 5, path)), tail,
                       what + " at world " + std::to_string(pg.size()) + " " + sharding_name(sharding));
  });
}

}  // namespace

TEST_CASE("Trainer sharding none / zero1 / zero2 / full: the same losses and weights (bf16, clipping, 2 groups)") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    run_ranks(n, [](ProcessGroup& pg) {
      std::vector<double> w_none, w1, w2, w3;
      Run r;
      r.amp = DType::bf16;
      r.clip = 0.1;
      const auto none = train(pg, r, &w_none);
      r.sharding = Sharding::zero1;
      const auto z1 = train(pg, r, &w1);
      r.sharding = Sharding::zero2;
      const auto z2 = train(pg, r, &w2);
      r.sharding = Sharding::full;
      const auto z3 = train(pg, r, &w3);
      double scale = 0;
      for (double w : w_none) scale = std::max(scale, std::fabs(w));
      expect_same_losses(z1, none, "zero1 losses");
      expect_same_losses(z2, none, "zero2 losses");
      expect_rel(w1, w_none, 1e-6, scale, "zero1 weights");
      expect_rel(w2, w_none, 1e-6, scale, "zero2 weights");
      expect_same_losses(z3, none, "full losses");
      expect_rel(w3, w_none, 1e-6, scale, "full weights");
    });
  }
}

TEST_CASE("A sharded checkpoint written at world 3 resumes at world 2 and 1 with the uninterrupted losses") {
  TempDir dir("kiln_zero_ckpt");
  const std::string ckpt = dir.path + "/step_5.safetensors";
  const std::string reference = dir.path + "/losses.txt";
  // Uninterrupted, world 3, zero2: ten steps.
  run_ranks(3, [&](ProcessGroup& pg) {
    Run r;
    r.sharding = Sharding::zero2;
    auto losses = train(pg, r);
    if (pg.rank() == 0) write_values(reference, losses);
  });
  // Interrupted after 5 steps: every rank writes its shard, rank 0 the index.
  save_at(3, Sharding::zero2, 5, ckpt);
  REQUIRE(std::filesystem::exists(ckpt));
  for (int r = 0; r < 3; ++r) REQUIRE(std::filesystem::exists(shard_path(ckpt, r, 3)));
  const std::vector<double> want = read_values(reference);
  REQUIRE(want.size() == 10);
  const std::vector<double> tail(want.begin() + 5, want.end());
  struct Resume {
    int world;
    Sharding sharding;
  };
  for (Resume res : {Resume{2, Sharding::zero1}, Resume{2, Sharding::zero2}, Resume{1, Sharding::zero2},
                     Resume{1, Sharding::none}, Resume{3, Sharding::none}, Resume{2, Sharding::full},
                     Resume{1, Sharding::full}})
    expect_resumes(res.world, res.sharding, ckpt, tail, "resumed");
  // The consolidated (full-state) save of zero1 at world 3 resumes under zero2 at world 2 as well.
  const std::string full_ckpt = dir.path + "/full_step_5.safetensors";
  save_at(3, Sharding::zero1, 5, full_ckpt, /*sharded=*/false);
  REQUIRE(!std::filesystem::exists(shard_path(full_ckpt, 0, 3)));
  expect_resumes(2, Sharding::zero2, full_ckpt, tail, "full-state checkpoint resumed");
  // Written in full mode (FSDP) at world 3, sharded and full-state: resumed at world 2 (zero2, full)
  // and world 1 (none).
  for (bool sharded : {true, false}) {
    CAPTURE(sharded);
    const std::string fsdp_ckpt = dir.path + (sharded ? "/fsdp_sharded_step_5.safetensors" : "/fsdp_full_step_5.safetensors");
    save_at(3, Sharding::full, 5, fsdp_ckpt, sharded);
    REQUIRE(std::filesystem::exists(shard_path(fsdp_ckpt, 2, 3)) == sharded);
    for (Resume res : {Resume{2, Sharding::zero2}, Resume{2, Sharding::full}, Resume{1, Sharding::none}})
      expect_resumes(res.world, res.sharding, fsdp_ckpt, tail, "full-mode checkpoint resumed");
  }
}

TEST_CASE("A sharded checkpoint with a missing shard fails naming it") {
  TempDir dir("kiln_zero_missing");
  const std::string ckpt = dir.path + "/step_2.safetensors";
  save_at(2, Sharding::zero1, 2, ckpt);
  std::filesystem::remove(shard_path(ckpt, 1, 2));
  run_ranks(1, [&](ProcessGroup& pg) {
    const Run r = resumed(Sharding::zero1, 2, ckpt);
    expect_contains(error_of([&] { train(pg, r); }, "missing shard"), "shard 1 of 2 is missing", "missing shard");
  });
}

TEST_CASE("Trainer sharding zero1 / zero2 / full with f16 and the GradScaler: DDP's steps, the same skipped ones") {
  // A first scale of 2^19 overflows the f16 backward: the first steps are skipped while the scale
  // backs off, and growth every 3 good steps brings it back up. ZeRO-2 and FSDP unscale and check
  // the reduce-scattered shard (ShardedOptimizer::step_gradients); the flag is MAX-reduced over ranks.
  for (int n : {2, 3}) {
    CAPTURE(n);
    run_ranks(n, [](ProcessGroup& pg) {
      Run r;
      r.amp = DType::f16;
      r.clip = 0.1;
      r.init_scale = 524288.0;  // 2^19
      std::vector<double> w_none, w;
      int skipped_none = 0;
      r.skipped = &skipped_none;
      const auto none = train(pg, r, &w_none);
      expect(skipped_none > 0 && skipped_none < 8, "DDP f16 skipped " + std::to_string(skipped_none) + " of 10 steps");
      double scale = 0;
      for (double x : w_none) scale = std::max(scale, std::fabs(x));
      for (Sharding sharding : {Sharding::zero1, Sharding::zero2, Sharding::full}) {
        const std::string what = std::string(sharding_name(sharding)) + " f16";
        int skipped = 0;
        r.sharding = sharding;
        r.skipped = &skipped;
        const auto losses = train(pg, r, &w);
        expect(skipped == skipped_none, what + ": skipped " + std::to_string(skipped) + " steps, DDP " +
                                            std::to_string(skipped_none));
        expect_same_losses(losses, none, what + " losses");
        expect_rel(w, w_none, 1e-6, scale, what + " weights");
      }
    });
  }
}
