// The data-parallel Trainer: accumulation, clipping, autocast, f16 overflow skips, bitwise resume
// from a checkpoint (single process), then 2 Gloo ranks against one process on the whole batch.
// The last case runs the README's "Multi-process training" example, so the snippet compiles.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <limits>

#include <kiln/kiln.h>
#include <kiln/parallel/trainer.h>

#include "parallel/ddp_fixtures.h"
#include "parallel/temp_dir.h"

using namespace kiln;
using namespace kiln::dist;
using namespace kiln::test;

namespace {

// max |a - e| / (|e| + 0.01) (parameters are O(0.1..1)).
double max_rel_diff(const std::vector<double>& a, const std::vector<double>& e) {
  REQUIRE(a.size() == e.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - e[i]) / (std::fabs(e[i]) + 0.01));
  return worst;
}

std::shared_ptr<Net> make_net(const TrainSpec& s, uint64_t seed = 100) {
  auto net = std::make_shared<Net>(seed, s.net);
  net->to(s.dtype);
  return net;
}

std::shared_ptr<optim::AdamW> adamw(const nn::Module& m) {
  return std::make_shared<optim::AdamW>(m.parameters(), optim::AdamWOptions(1e-2));
}

// Loss of rows [start, start + rows) of step `step`'s global batch of `total` rows.
Tensor rows_loss(Net& net, const TrainSpec& s, int step, int64_t start, int64_t rows, int64_t total) {
  auto [x, y] = batch_rows(s, step, start, rows, total);
  return mse_loss(net.forward(x), y);
}


// fc2(dropout(relu(fc1(x)))): the dropout masks come from the default generator.
struct DropNet : nn::Module {
  explicit DropNet(uint64_t seed) {
    Generator g(seed);
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(nn::LinearOptions(6, 16).generator(g)));
    drop = register_module("drop", std::make_shared<nn::Dropout>(nn::DropoutOptions(0.3)));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(nn::LinearOptions(16, 4).generator(g)));
  }
  Tensor forward(const Tensor& x) { return fc2->forward(drop->forward(relu(fc1->forward(x)))); }
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::Dropout> drop;
};

struct ResumeRun {
  std::shared_ptr<DropNet> net;
  std::shared_ptr<Trainer> trainer;
};

// AdamW + warmup-cosine + clipping + f16 with a scale that grows every 2 steps: every piece of
// state a resume must restore changes from step to step.
ResumeRun make_resume_run(uint64_t init_seed, const std::string& dir = "", int checkpoint_every = 0,
                          std::function<std::string()> cursor = nullptr) {
  ResumeRun r;
  r.net = std::make_shared<DropNet>(init_seed);
  auto opt = std::make_shared<optim::AdamW>(r.net->parameters(), optim::AdamWOptions(2e-2).weight_decay(0.1));
  auto options = TrainerOptions().grad_accum_steps(2).clip_grad_norm(0.5).amp(DType::f16)
                     .grad_scaler(optim::GradScalerOptions().init_scale(256).growth_interval(2));
  if (checkpoint_every > 0) options.checkpoint_every(checkpoint_every).checkpoint_dir(dir).keep_last_checkpoints(2)
                                                   .checkpoint_cursor(std::move(cursor));
  r.trainer = std::make_shared<Trainer>(r.net, opt, nullptr, options,
                                        optim::warmup_cosine_schedule(optim::WarmupCosineOptions(2, 6)));
  return r;
}

StepStats resume_step(ResumeRun& r, int step) {
  return r.trainer->step(
      [&](int micro) {
        Tensor x = test::random({5, 6}, DType::f32, 300 + 2 * step + micro);
        Tensor y = test::random({5, 4}, DType::f32, 400 + 2 * step + micro);
        return mse_loss(r.net->forward(x), y);
      },
      StepOptions().sync_loss(true));
}

}  // namespace

TEST_CASE("Trainer: 4 accumulated micro-batches equal one step on the concatenated batch (f64)") {
  TrainSpec s;
  s.dtype = DType::f64;
  const int64_t b = 4, k = 4;
  auto net_a = make_net(s), net_b = make_net(s);
  Trainer a(net_a, adamw(*net_a), nullptr, TrainerOptions().grad_accum_steps(k).log_every(1));
  Trainer b1(net_b, adamw(*net_b), nullptr, TrainerOptions().log_every(1));
  for (int step = 0; step < 3; ++step) {
    StepStats sa = a.step([&](int m) { return rows_loss(*net_a, s, step, m * b, b, k * b); });
    StepStats sb = b1.step([&](int) { return rows_loss(*net_b, s, step, 0, k * b, k * b); });
    CHECK(sa.logged);
    CHECK(sa.loss == doctest::Approx(sb.loss).epsilon(1e-12));
    CHECK(sa.step == step);
  }
  CHECK(a.global_step() == 3);
  CHECK(max_rel_diff(flat_parameters(*net_a), flat_parameters(*net_b)) <= 1e-6);
  for (const Tensor& p : net_a->parameters()) CHECK_FALSE(p.grad().defined());  // zero_grad(set_to_none)
}

TEST_CASE("Trainer: clipping scales the update and returns the total norm before clipping") {
  TrainSpec s;
  s.dtype = DType::f64;
  auto net = make_net(s), probe = make_net(s);
  rows_loss(*probe, s, 0, 0, 8, 8).backward();
  double sq = 0;
  std::vector<double> expected;
  for (const Tensor& p : probe->parameters())
    for (double g : test::values(p.grad())) sq += g * g;
  const double norm = std::sqrt(sq), max_norm = 0.05, lr = 0.1;
  const double coef = std::min(1.0, max_norm / (norm + 1e-6));
  REQUIRE(coef < 0.5);  // the clip must really bite
  for (const Tensor& p : probe->parameters()) {
    auto w = test::values(p), g = test::values(p.grad());
    for (size_t i = 0; i < w.size(); ++i) expected.push_back(w[i] - lr * coef * g[i]);
  }
  Trainer t(net, std::make_shared<optim::SGD>(net->parameters(), optim::SGDOptions(lr)), nullptr,
            TrainerOptions().clip_grad_norm(max_norm));
  StepStats st = t.step([&](int) { return rows_loss(*net, s, 0, 0, 8, 8); });
  CHECK(st.grad_norm == doctest::Approx(norm).epsilon(1e-12));
  CHECK(max_rel_diff(flat_parameters(*net), expected) <= 1e-12);
  CHECK(st.logged);  // step 0 is a log step with log_every 10
  StepStats st2 = t.step([&](int) { return rows_loss(*net, s, 1, 0, 8, 8); });
  CHECK_FALSE(st2.logged);
  CHECK(std::isnan(st2.loss));
  CHECK(st2.local_loss.item() > 0);
}

TEST_CASE("Trainer: bf16 autocast trains close to f32 but not identically") {
  TrainSpec s;
  auto net32 = make_net(s), net16 = make_net(s);
  Trainer t32(net32, adamw(*net32), nullptr, TrainerOptions().log_every(1));
  Trainer t16(net16, adamw(*net16), nullptr, TrainerOptions().log_every(1).amp(DType::bf16));
  bool differs = false;
  for (int step = 0; step < 4; ++step) {
    double l32 = t32.step([&](int) { return rows_loss(*net32, s, step, 0, 16, 16); }).loss;
    double l16 = t16.step([&](int) { return rows_loss(*net16, s, step, 0, 16, 16); }).loss;
    CHECK(l16 == doctest::Approx(l32).epsilon(3e-2));
    differs = differs || l16 != l32;
  }
  CHECK(differs);
  CHECK(max_rel_diff(flat_parameters(*net16), flat_parameters(*net32)) <= 3e-2);
}

TEST_CASE("Trainer: f16 with an overflowing micro-step skips the update and backs off the scale") {
  TrainSpec s;
  auto net = make_net(s);
  // log_every 1: `skipped` is read on the host every step (Note [Trainer host reads]).
  Trainer t(net, adamw(*net), nullptr, TrainerOptions().amp(DType::f16).grad_accum_steps(2).log_every(1));
  const double inf = std::numeric_limits<double>::infinity();
  auto run = [&](int step, bool poison) {
    return t.step([&](int m) {
      Tensor loss = rows_loss(*net, s, step, m * 4, 4, 8);
      return poison && m == 1 ? loss * inf : loss;
    });
  };
  CHECK_FALSE(run(0, false).skipped);
  const double scale = t.grad_scaler().scale_value();
  auto before = flat_parameters(*net);
  CHECK(run(1, true).skipped);
  CHECK(flat_parameters(*net) == before);
  CHECK(t.grad_scaler().scale_value() == scale * 0.5);
  CHECK(t.global_step() == 2);  // the schedule and the step count advance anyway
  CHECK_FALSE(run(2, false).skipped);
  CHECK(flat_parameters(*net) != before);
}

TEST_CASE("Trainer: grad_norm and skipped are read on log steps only; the device tensors always hold them") {
  TrainSpec s;
  auto net = make_net(s);
  Trainer t(net, adamw(*net), nullptr,
            TrainerOptions().amp(DType::f16).clip_grad_norm(0.5).log_every(3)
                .grad_scaler(optim::GradScalerOptions().init_scale(1024)));
  const double inf = std::numeric_limits<double>::infinity();
  auto run = [&](int step, bool poison, bool sync = false) {
    return t.step(
        [&](int) {
          Tensor loss = rows_loss(*net, s, step, 0, 8, 8);
          return poison ? loss * inf : loss;
        },
        StepOptions().sync_loss(sync));
  };
  // Step 0: a log step (0 % 3 == 0), clean.
  StepStats s0 = run(0, false);
  CHECK(s0.logged);
  REQUIRE(s0.grad_norm_tensor.defined());
  REQUIRE(s0.found_inf.defined());
  CHECK(std::isfinite(s0.grad_norm));
  CHECK(s0.grad_norm > 0);
  CHECK(s0.grad_norm == s0.grad_norm_tensor.item());
  CHECK(s0.grad_norm_tensor.dtype() == DType::f64);
  CHECK_FALSE(s0.skipped);
  CHECK(s0.found_inf.item() == 0.0);
  // Step 1: not a log step and poisoned: nothing read on the host, the tensors know.
  auto before = flat_parameters(*net);
  StepStats s1 = run(1, true);
  CHECK_FALSE(s1.logged);
  CHECK(std::isnan(s1.loss));
  CHECK(std::isnan(s1.grad_norm));
  CHECK_FALSE(s1.skipped);
  CHECK(s1.found_inf.item() == 1.0);
  CHECK_FALSE(std::isfinite(s1.grad_norm_tensor.item()));
  CHECK(flat_parameters(*net) == before);  // skipped on the device flag
  CHECK(t.grad_scaler().scale_value() == 512.0);
  // Step 2: not a log step, clean: the update happens, grad_norm stays NaN on the host.
  StepStats s2 = run(2, false);
  CHECK(std::isnan(s2.grad_norm));
  CHECK(std::isfinite(s2.grad_norm_tensor.item()));
  CHECK(s2.found_inf.item() == 0.0);
  CHECK(flat_parameters(*net) != before);
  // Step 4 (not a log step) made one by sync_loss: poisoned, so skipped is read as true.
  run(3, false);
  StepStats s4 = run(4, true, /*sync=*/true);
  CHECK(s4.logged);
  CHECK(s4.skipped);
  CHECK_FALSE(std::isfinite(s4.grad_norm));
  // Without f16 there is no found_inf; without clipping no norm.
  auto net32 = make_net(s);
  Trainer plain(net32, adamw(*net32), nullptr, TrainerOptions().log_every(1));
  StepStats p0 = plain.step([&](int) { return rows_loss(*net32, s, 0, 0, 8, 8); });
  CHECK(p0.logged);
  CHECK_FALSE(p0.found_inf.defined());
  CHECK_FALSE(p0.grad_norm_tensor.defined());
  CHECK(std::isnan(p0.grad_norm));
  CHECK_FALSE(p0.skipped);
}

TEST_CASE("Trainer: the device-flag step equals the host-read loop bitwise (f16, clipping, accumulation, overflows)") {
  // The loop the Trainer ran before it kept found_inf and the norm on the device: every value read
  // on the host (GradScaler::found_inf/step's bool, clip_grad_norm's double).
  TrainSpec s;
  const int k = 2;
  const double inf = std::numeric_limits<double>::infinity();
  auto poisoned = [](int step, int micro) { return (step == 2 && micro == 1) || step == 5; };
  auto net_a = make_net(s), net_b = make_net(s);
  Trainer t(net_a, adamw(*net_a), nullptr,
            TrainerOptions().amp(DType::f16).grad_accum_steps(k).clip_grad_norm(0.3).log_every(1)
                .grad_scaler(optim::GradScalerOptions().init_scale(4096).growth_interval(3)));
  auto opt_b = adamw(*net_b);
  optim::GradScaler scaler(optim::GradScalerOptions().init_scale(4096).growth_interval(3));
  std::vector<Tensor> params_b = net_b->parameters();
  for (int step = 0; step < 8; ++step) {
    CAPTURE(step);
    StepStats st = t.step([&](int m) {
      Tensor loss = rows_loss(*net_a, s, step, m * 4, 4, 8);
      return poisoned(step, m) ? loss * inf : loss;
    });
    for (int m = 0; m < k; ++m) {
      Tensor loss;
      {
        AutocastGuard guard(DType::f16, true);
        loss = rows_loss(*net_b, s, step, m * 4, 4, 8);
        if (poisoned(step, m)) loss = loss * inf;
      }
      scaler.scale(loss * (1.0 / k)).backward();
    }
    scaler.unscale_(*opt_b);
    scaler.set_found_inf(scaler.found_inf());
    const double norm = optim::clip_grad_norm(params_b, 0.3);
    const bool stepped = scaler.step(*opt_b);
    scaler.update();
    opt_b->zero_grad(true);
    CHECK(st.skipped == !stepped);
    CHECK(st.skipped == poisoned(step, 1));
    if (std::isnan(norm))
      CHECK(std::isnan(st.grad_norm));
    else
      CHECK(st.grad_norm == norm);
    CHECK(t.grad_scaler().scale_value() == scaler.scale_value());
    CHECK(t.grad_scaler().growth_tracker() == scaler.growth_tracker());
    CHECK(flat_parameters(*net_a) == flat_parameters(*net_b));
  }
}

TEST_CASE("Trainer: save at step 3 and resume reproduces steps 4..6 bitwise (weights, RNG, schedule, scaler)") {
  TempDir dir("kiln_trainer");
  const std::string path = dir.path + "/resume.safetensors";
  manual_seed(7);
  ResumeRun full = make_resume_run(1);
  std::vector<double> losses, lrs;
  for (int step = 0; step < 6; ++step) {
    StepStats st = resume_step(full, step);
    losses.push_back(st.loss);
    lrs.push_back(st.lr);
  }
  manual_seed(7);
  ResumeRun first = make_resume_run(1);
  for (int step = 0; step < 3; ++step) CHECK(resume_step(first, step).loss == losses[step]);
  first.trainer->save_checkpoint(path, "cursor:3");
  const double scale_at_3 = first.trainer->grad_scaler().scale_value();

  manual_seed(12345);                      // a different RNG position ...
  ResumeRun resumed = make_resume_run(9);  // ... and different initial weights
  std::optional<std::string> cursor = resumed.trainer->load_checkpoint(path);
  REQUIRE(cursor.has_value());
  CHECK(*cursor == "cursor:3");
  CHECK(resumed.trainer->global_step() == 3);
  CHECK(resumed.trainer->scheduler().last_step() == 3);
  CHECK(resumed.trainer->grad_scaler().scale_value() == scale_at_3);
  for (int step = 3; step < 6; ++step) {
    StepStats st = resume_step(resumed, step);
    CHECK(st.loss == losses[step]);
    CHECK(st.lr == lrs[step]);
  }
  CHECK(flat_parameters(*resumed.net) == flat_parameters(*full.net));
  CHECK(default_generator().offset() > 0);
  CHECK_FALSE(resumed.trainer->load_checkpoint("").has_value());
  CHECK_THROWS_AS(resumed.trainer->load_checkpoint(dir.path + "/missing.safetensors"), Error);
}

TEST_CASE("Trainer: automatic checkpoints every N steps keep the last ones; latest_checkpoint finds the newest") {
  TempDir dir("kiln_trainer");
  const std::string ckpt = dir.path + "/ckpt";
  CHECK(Trainer::latest_checkpoint(ckpt).empty());
  int steps_done = 0;
  ResumeRun r = make_resume_run(1, ckpt, 2, [&] { return std::to_string(steps_done + 1); });
  for (; steps_done < 7; ++steps_done) resume_step(r, steps_done);
  namespace fs = std::filesystem;
  CHECK_FALSE(fs::exists(Trainer::checkpoint_path(ckpt, 2)));
  CHECK(fs::exists(Trainer::checkpoint_path(ckpt, 4)));
  CHECK(fs::exists(Trainer::checkpoint_path(ckpt, 6)));
  CHECK(Trainer::latest_checkpoint(ckpt) == Trainer::checkpoint_path(ckpt, 6));
  ResumeRun other = make_resume_run(3);
  CHECK(other.trainer->load_checkpoint(Trainer::latest_checkpoint(ckpt)) == std::optional<std::string>("6"));
  CHECK(other.trainer->global_step() == 6);
  CHECK_THROWS_AS(Trainer(r.net, adamw(*r.net), nullptr, TrainerOptions().checkpoint_every(5)), Error);
  CHECK_THROWS_AS(Trainer(r.net, adamw(*r.net), nullptr, TrainerOptions().grad_accum_steps(0)), Error);
  CHECK_THROWS_AS(Trainer(r.net, adamw(*r.net), nullptr, TrainerOptions().amp(DType::f64)), Error);
}

TEST_CASE("Trainer, 2 ranks: batch b each equals one process with batch 2b accumulated over 2 micro-steps") {
  run_ranks(2, [](ProcessGroup& pg) {
    TrainSpec s;
    const int64_t b = 3;
    auto group = test::borrow(pg);
    auto net = make_net(s, test::seed_for_rank(pg.rank()));  // DDP broadcasts rank 0's weights
    Trainer t(net, adamw(*net), group, TrainerOptions().log_every(1).ddp(test::small_buckets()));
    test::expect(t.ddp() != nullptr && t.is_main() == (pg.rank() == 0), "a DDP trainer on 2 ranks");
    auto ref_net = make_net(s, test::seed_for_rank(0));
    Trainer ref(ref_net, adamw(*ref_net), nullptr, TrainerOptions().log_every(1).grad_accum_steps(2));
    for (int step = 0; step < 5; ++step) {
      StepStats st = t.step([&](int) { return rows_loss(*net, s, step, pg.rank() * b, b, 2 * b); },
                            StepOptions().items(b));
      StepStats sr = ref.step([&](int m) { return rows_loss(*ref_net, s, step, m * b, b, 2 * b); });
      test::expect(std::fabs(st.loss - sr.loss) <= 1e-5 * std::fabs(sr.loss),
                   "rank-averaged loss " + std::to_string(st.loss) + " vs " + std::to_string(sr.loss));
      test::expect(st.items == 2 * b, "items summed over ranks");
    }
    test::expect_close(flat_parameters(*net), flat_parameters(*ref_net), 1e-5, "parameters after 5 steps");
  });
}

TEST_CASE("Trainer, 2 ranks: register_comm_hook sends each DDP bucket through the hook; zero2 and full refuse one") {
  run_ranks(2, [](ProcessGroup& pg) {
    TrainSpec s;
    const int64_t b = 3;
    auto group = test::borrow(pg);
    auto make = [&](Sharding sharding) {
      auto net = make_net(s, test::seed_for_rank(pg.rank()));
      auto t = std::make_unique<Trainer>(net, adamw(*net), group,
                                         TrainerOptions().sharding(sharding).ddp(test::small_buckets()));
      return std::make_pair(net, std::move(t));
    };
    for (Sharding refused : {Sharding::zero2, Sharding::full}) {
      auto [net, t] = make(refused);
      const std::string message = test::error_of([&] { t->register_comm_hook(allreduce_hook); }, "a refused hook");
      test::expect(message.find(std::string("sharding ") + sharding_name(refused)) != std::string::npos,
                   "the refusal names the sharding: " + message);
    }
    auto [hooked_net, hooked] = make(Sharding::none);
    auto [plain_net, plain] = make(Sharding::none);
    std::vector<std::pair<size_t, bool>> seen;  // (index, is_last) of each hooked bucket, in order
    int64_t seen_elements = 0;
    hooked->register_comm_hook([&](ProcessGroup& g, GradBucket& bucket) {
      seen.emplace_back(bucket.index, bucket.is_last);
      for (size_t k = 0; k < bucket.parameters.size(); ++k) {
        test::expect(bucket.gradient(k).shape() == bucket.parameters[k].shape(), "a bucket gradient's shape");
        seen_elements += bucket.parameters[k].numel();
      }
      test::expect(bucket.offsets.back() + bucket.parameters.back().numel() == bucket.buffer.numel(),
                   "the last offset ends the bucket");
      return allreduce_hook(g, bucket);
    });
    const int steps = 3;
    for (int step = 0; step < steps; ++step) {
      auto loss = [&](Net& net) { return [&, step](int) { return rows_loss(net, s, step, pg.rank() * b, b, 2 * b); }; };
      hooked->step(loss(*hooked_net));
      plain->step(loss(*plain_net));
    }
    const size_t buckets = seen.size() / steps;
    test::expect(buckets > 1 && seen.size() == buckets * steps, "several buckets, the same each step");
    for (size_t i = 0; i < seen.size(); ++i)
      test::expect(seen[i].first == i % buckets && seen[i].second == (i % buckets == buckets - 1),
                   "bucket " + std::to_string(i) + ": index and is_last in reduction order");
    int64_t numel = 0;
    for (const Tensor& p : hooked_net->parameters()) numel += p.numel();
    test::expect(seen_elements == numel * steps, "every parameter in exactly one bucket per step");
    test::expect_close(flat_parameters(*hooked_net), flat_parameters(*plain_net), 0.0,
                       "allreduce_hook equals DDP's own all-reduce (bitwise)");
  });
}

TEST_CASE("Trainer, 2 ranks: an f16 overflow on rank 1 only makes both ranks skip the step") {
  run_ranks(2, [](ProcessGroup& pg) {
    TrainSpec s;
    auto group = test::borrow(pg);
    auto net = make_net(s, test::seed_for_rank(pg.rank()));
    Trainer t(net, adamw(*net), group, TrainerOptions().amp(DType::f16));
    const double inf = std::numeric_limits<double>::infinity();
    // Rank 1 overflows on steps 1 and 3. Step 1 is made a log step (skipped read on the host);
    // step 3 is not one (log_every 10): there only the cross-rank device flag says it.
    auto poisoned = [&](int step) { return (step == 1 || step == 3) && pg.rank() == 1; };
    for (int step = 0; step < 5; ++step) {
      auto before = flat_parameters(*net);
      StepStats st = t.step(
          [&](int) {
            Tensor loss = rows_loss(*net, s, step, pg.rank() * 4, 4, 8);
            return poisoned(step) ? loss * inf : loss;
          },
          StepOptions().sync_loss(step == 1));
      const bool skip = step == 1 || step == 3;
      const std::string where = "rank " + std::to_string(pg.rank()) + " step " + std::to_string(step);
      test::expect(st.logged == (step == 0 || step == 1), where + ": log steps");
      test::expect(st.skipped == (skip && st.logged), where + (st.skipped ? " skipped" : " did not skip"));
      test::expect((st.found_inf.item() != 0.0) == skip, where + ": the cross-rank found_inf tensor");
      test::expect((flat_parameters(*net) == before) == skip, where + ": weights change exactly when not skipped");
    }
  });
}

// README "Multi-process training": the block between the markers is the README's snippet.
void readme_example(const std::function<std::pair<Tensor, Tensor>()>& next_batch) {
  // README-BEGIN
  auto group = dist::init_process_group();  // RANK, WORLD_SIZE, MASTER_ADDR/PORT from kiln-run or torchrun
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 32), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(32, 4));
  auto opt = std::make_shared<optim::AdamW>(model->parameters(), optim::AdamWOptions(1e-2));
  dist::Trainer trainer(model, opt, group,
                        dist::TrainerOptions().grad_accum_steps(4).clip_grad_norm(1.0).amp(DType::bf16)
                            .checkpoint_every(100).checkpoint_dir("ckpt"),
                        optim::warmup_cosine_schedule(optim::WarmupCosineOptions(20, 200)));
  trainer.load_checkpoint(dist::Trainer::latest_checkpoint("ckpt"));  // resume when there is one
  while (trainer.global_step() < 200) {
    auto stats = trainer.step([&](int) { auto [x, y] = next_batch(); return mse_loss(model->forward(x), y); });
    if (stats.logged && trainer.is_main()) std::printf("step %lld loss %.4f\n", (long long)stats.step, stats.loss);
  }
  // README-END
}

TEST_CASE("Trainer: the README example trains, checkpoints and resumes") {
  TempDir dir("kiln_trainer");
  std::string port = std::to_string(pick_free_port());
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", port.c_str(), 1);
  auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path);
  Tensor w = test::random({8, 4}, DType::f32, 5);
  uint64_t seed = 0;
  readme_example([&] {
    Tensor x = test::random({16, 8}, DType::f32, 1000 + seed++);
    return std::make_pair(x, matmul(x, w));
  });
  CHECK(seed == 800);
  CHECK(std::filesystem::exists("ckpt/step_100.safetensors"));
  CHECK(std::filesystem::exists("ckpt/step_200.safetensors"));
  port = std::to_string(pick_free_port());
  ::setenv("MASTER_PORT", port.c_str(), 1);
  readme_example([&] { return std::make_pair(Tensor(), Tensor()); });  // resumes at 200: no step runs
  std::filesystem::current_path(cwd);
}
