// train_gpt: trains the bundled GPT on llm.c-format token shards, single-process or one rank per
// process under kiln-run/torchrun (dist::Trainer: accumulation, autocast, clipping, AdamW with
// decay on 2-D weights only, warmup + cosine, checkpoints that resume bitwise with the data cursor).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "common/app_main.h"
#include "common/cpu_peak.h"
#include "common/dtype_flag.h"
#include "common/job.h"
#include "common/parallel_flags.h"
#include "common/profiling.h"
#include "common/text_file.h"
#include "gpt/fit_memory.h"
#include "gpt/mfu.h"
#include "gpt/model_flags.h"
#include "gpt/report.h"
#include "gpt/train_batches.h"
#include "gpt/train_flags.h"
#include "gpt/val_loss.h"

using namespace kiln;

namespace {

int run(apps::TrainGptArgs a) {
  dist::PreemptionGuard preemption;  // before any thread starts (Note [Signals and oneDNN])
  if (a.threads > 0) set_num_threads(a.threads);
  const models::GPTConfig config = apps::apply_overrides(a.shape, models::gpt_config(a.shape.model));
  KILN_CHECK(a.seq_len <= config.block_size, "--seq-len ", a.seq_len, " exceeds the model's context ", config.block_size);
  KILN_CHECK(a.eval_every == 0 || !a.val.empty(), "--eval-every needs --val shards");
  KILN_CHECK(!a.resume || !a.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
  KILN_CHECK(a.warmup_steps < a.steps, "--warmup-steps ", a.warmup_steps, " must be below --steps ",
             a.steps);
  KILN_CHECK(a.min_lr <= a.lr, "--min-lr ", a.min_lr, " exceeds --lr ", a.lr);

  const apps::Job job = apps::join_job(apps::JobOptions().device(a.device));
  const Device device = job.device;
  const int world = job.world;
  const DType amp = apps::parse_dtype_flag(a.dtype, apps::kTrainGptDTypes);
  if (a.fit.gib > 0)  // sets B and --recompute for the asked global batch (apps/gpt/fit_memory.h)
    apps::apply_fit_memory(a.fit, config, a.seq_len, job, amp, a.fused_head, a.parallel, a.batch_size,
                           a.total_batch_tokens, a.recompute);

  const int64_t micro_tokens = a.batch_size * a.seq_len * world;
  if (a.total_batch_tokens == 0) a.total_batch_tokens = micro_tokens;
  KILN_CHECK(a.total_batch_tokens % micro_tokens == 0, "--total-batch-tokens ", a.total_batch_tokens,
             " is not a multiple of B*T*world size = ", a.batch_size, "*", a.seq_len, "*", world, " = ", micro_tokens);
  const int accum = static_cast<int>(a.total_batch_tokens / micro_tokens);

  auto loader_options = [&](const std::string& pattern) {
    return data::TokenLoaderOptions(pattern, a.batch_size, a.seq_len).rank(job.rank).world_size(world)
        .vocab_size(config.vocab_size).pin_memory(device.is_cuda());
  };
  data::TokenLoader train_loader(loader_options(a.train).seed(a.seed));
  std::optional<data::TokenLoader> val_loader;
  if (!a.val.empty()) val_loader.emplace(loader_options(a.val).shuffle(false));
  const int64_t eval_batches = std::max<int64_t>(1, a.eval_tokens / micro_tokens);
  if (!a.entropy_floor) a.entropy_floor = apps::read_entropy_floor(a.train);

  default_generator().manual_seed(a.seed);
  auto model = std::make_shared<models::GPT>(models::GPTOptions(config)
                                                 .seed(a.seed)
                                                 .recompute(apps::parse_recompute_flag(a.recompute))
                                                 .fused_head(apps::parse_fused_head(a.fused_head)));
  model->to(device);  // before the optimizer and the trainer see the parameters
  const auto adamw = optim::AdamWOptions(a.lr).betas({0.9, 0.95}).eps(1e-8);
  std::vector<optim::AdamW::Group> groups;
  for (auto& g : model->param_groups(a.weight_decay))
    groups.push_back({g.params, optim::AdamWOptions(adamw).weight_decay(g.weight_decay)});
  auto optimizer = std::make_shared<optim::AdamW>(std::move(groups));
  dist::TrainerOptions topts =
      apps::with_parallel_flags(dist::TrainerOptions(), a.parallel)
          .grad_accum_steps(accum).clip_grad_norm(a.grad_clip).amp(amp)
          .log_every(0)  // train_gpt asks for the loss itself (sync_loss)
          .fsdp(dist::FSDPOptions().wrap({"GPTBlock"}))  // --sharding full's units
          .cuda_graph(a.cuda_graph);
  // The loop saves the --checkpoint-every checkpoints itself (Note [Metrics before the checkpoint]);
  // the trainer's directory is where prune_checkpoints keeps the last ones.
  if (!a.checkpoint_dir.empty()) topts.checkpoint_dir(a.checkpoint_dir);
  dist::Trainer trainer(model, optimizer, job.group, topts,
                        optim::warmup_cosine_schedule(optim::WarmupCosineOptions(a.warmup_steps, a.steps)
                                                          .min_factor(a.min_lr / a.lr)));
  apps::register_comm_hook(trainer, a.parallel, a.seed);

  std::string resumed_from;
  if (a.resume) {
    resumed_from = apps::agreed_checkpoint(job, a.checkpoint_dir);
    if (auto cursor = trainer.load_checkpoint(resumed_from); cursor && !cursor->empty()) train_loader.set_cursor(*cursor);
  }
  if (job.main() && !a.checkpoint_dir.empty()) {
    std::filesystem::create_directories(a.checkpoint_dir);
    apps::write_text_file((std::filesystem::path(a.checkpoint_dir) / "config.json").string(), config.to_json(2) + "\n",
                          "the model config");
  }

  const int64_t non_embedding = model->num_parameters(/*non_embedding=*/true);
  const double device_peak = apps::device_peak_flops(device, amp, num_threads());
  const double peak = a.peak_flops > 0 ? a.peak_flops * world : device_peak * world;
  const double flops_tok = apps::flops_per_token(config, non_embedding, a.seq_len);
  const int64_t end_step = a.stop_after > 0 ? std::min(a.stop_after, a.steps) : a.steps;
  // Note [Resume-safe metrics]: a resumed run's file is cut back to the checkpoint's step.
  apps::TrainReport report(job.main(), a.steps, a.entropy_floor,
                           apps::MetricsWriter(job.main() ? a.metrics : "", trainer.global_step()));
  if (job.main()) {
    model->print_num_parameters(std::cout);
    std::printf("\n%s: %lld layers, %lld heads, %lld dims | world %d x B %lld x T %lld x accum %d = %lld tokens/step"
                " | %lld train tokens | %.3g FLOPs/token\n",
                a.shape.model.c_str(), (long long)config.n_layer, (long long)config.n_head, (long long)config.n_embd, world,
                (long long)a.batch_size, (long long)a.seq_len, accum, (long long)a.total_batch_tokens,
                (long long)train_loader.num_tokens(), flops_tok);
    if (device.is_cpu()) std::printf("%s\n", cpu::capability_summary().c_str());
    if (device.is_cpu() && a.peak_flops <= 0)
      std::printf("MFU's peak (per rank): %s\n", apps::cpu_peak(num_threads()).describe().c_str());
    if (!resumed_from.empty()) std::printf("resumed from %s at step %lld\n", resumed_from.c_str(),
                                           (long long)trainer.global_step());
    else if (a.resume) std::printf("no checkpoint in %s common to all ranks: starting from step 0\n", a.checkpoint_dir.c_str());
  }
  report.start({{"type", "config"}, {"model", a.shape.model}, {"config", nlohmann::json::parse(config.to_json())},
                {"world_size", world}, {"grad_accum", accum}, {"tokens_per_step", a.total_batch_tokens},
                {"steps", a.steps}, {"start_step", trainer.global_step()}});

  const int64_t first_step = trainer.global_step();
  // Nothing in the loop reads the device except on log steps (Note [Trainer host reads]): batches
  // are loaded into pinned memory and go up without waiting, and f16's skipped steps are counted
  // on the device (LogWindow).
  apps::LogWindow window;
  apps::StepProfiler profiler(a.profile, job.group, device);
  apps::TrainBatches batches(train_loader, *model, device, a.cuda_graph);
  // SIGTERM/SIGINT/SIGUSR1: finish the step, checkpoint, exit 75 (Note [Preemption]; the guard is
  // made first thing in run(), before any thread). With NCCL the ranks agree at log steps, which read
  // the device anyway; on the CPU after every step.
  const int64_t preempt_every = device.is_cuda() && world > 1 ? a.log_every : 1;
  bool preempted = false;
  while (trainer.global_step() < end_step) {
    const int64_t step = trainer.global_step();
    const bool log = step == first_step || (step + 1) % a.log_every == 0 || step + 1 == end_step;
    profiler.begin_step(step);
    const dist::StepStats s = trainer.step(batches.micro_loss(step + 1, accum),
                                           dist::StepOptions().items(a.batch_size * a.seq_len * accum).sync_loss(log));
    profiler.end_step(step);
    window.add(s);
    if (s.logged) {
      apps::TrainLine line{step + 1, s.loss, s.lr, s.grad_norm, 0, 0, s.skipped, 0};
      window.fill(line);
      line.mfu = line.tokens_per_s * flops_tok / peak;
      report.train(line, report.elapsed() / double(step + 1 - first_step) * double(end_step - step - 1));
    }
    if (val_loader && a.eval_every > 0 && ((step + 1) % a.eval_every == 0 || step + 1 == a.steps)) {
      if (trainer.fsdp()) trainer.sync_buffers();  // FSDP: gathers the root unit the forward reads first
      report.eval(step + 1, apps::validation_loss(*model, *val_loader, eval_batches, amp, device, job.group));
    }
    // Note [Metrics before the checkpoint]: step N's metrics lines are written before step N's
    // checkpoint, so a run killed between the two resumes from the checkpoint before and logs step N
    // again; the other order (the trainer saving inside step()) left step N out of the metrics file
    // for good (4 of 52 kill -9s in #51).
    if (!a.checkpoint_dir.empty() && a.checkpoint_every > 0 && trainer.global_step() % a.checkpoint_every == 0) {
      trainer.save_checkpoint(dist::Trainer::checkpoint_path(a.checkpoint_dir, trainer.global_step()),
                              train_loader.cursor());
      trainer.prune_checkpoints();
    }
    if (trainer.global_step() < end_step && preemption.stop_requested(job.group.get(), step, preempt_every)) {
      preempted = true;
      break;
    }
  }

  profiler.finish();
  const int64_t done = trainer.global_step();
  if (!a.checkpoint_dir.empty() && (a.checkpoint_every == 0 || done % a.checkpoint_every != 0) && done > first_step)
    trainer.save_checkpoint(dist::Trainer::checkpoint_path(a.checkpoint_dir, done), train_loader.cursor());
  if (!a.checkpoint_dir.empty() && a.checkpoint_every > 0) trainer.prune_checkpoints();  // the final one counts too
  report.finish(done, a.loss_svg);
  if (preempted) {
    if (job.main())
      std::printf("train_gpt: stopped by a signal after step %lld%s; exit status %d (resume with --resume)\n",
                  (long long)done,
                  a.checkpoint_dir.empty() ? " (no --checkpoint-dir: nothing saved)"
                                           : (", checkpoint " + dist::Trainer::checkpoint_path(a.checkpoint_dir, done)).c_str(),
                  dist::kPreemptedExitStatus);
    std::fflush(stdout);
    return dist::kPreemptedExitStatus;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"train_gpt: train the bundled GPT on llm.c-format token shards (kiln-make-shards writes them). "
               "Single process, or one rank per process under kiln-run/torchrun/srun/mpirun (Gloo on the CPU); "
               "the loss printed and recorded is the mean over ranks and micro-steps. SIGTERM, SIGINT or SIGUSR1 "
               "(SLURM's --signal): the ranks finish the step, checkpoint it (--checkpoint-dir) and exit 75; "
               "--resume continues with no step lost; a second SIGTERM/SIGINT ends it at once.",
               "train_gpt"};
  apps::TrainGptArgs args;
  double floor_flag = std::numeric_limits<double>::quiet_NaN();
  apps::add_train_gpt_flags(app, args, floor_flag);
  return apps::run_main(app, argc, argv, apps::AppMainOptions("train_gpt"), [&] {
    if (!std::isnan(floor_flag)) args.entropy_floor = floor_flag;
    return run(args);
  });
}
