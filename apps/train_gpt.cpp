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
#include "gpt/val_loss.h"

using namespace kiln;

namespace {

const std::vector<DType> kDTypes = {DType::f32, DType::bf16, DType::f16};  // --dtype

struct Args {
  apps::ModelFlags shape;
  std::string train, val;
  int64_t batch_size = 8, seq_len = 128, total_batch_tokens = 0;
  double lr = 6e-4, min_lr = 6e-5, weight_decay = 0.1, grad_clip = 1.0;
  int64_t warmup_steps = 20, steps = 200, stop_after = 0;
  std::string dtype = "f32", device = "cpu";
  int64_t eval_every = 0, eval_tokens = 65536, log_every = 10;
  int64_t checkpoint_every = 0;
  std::string checkpoint_dir;
  bool resume = false;
  bool cuda_graph = false;
  std::string recompute = "none", fused_head = "auto";
  apps::FitMemoryFlags fit;
  apps::ParallelFlags parallel;
  uint64_t seed = 1337;
  int threads = 0;
  std::string metrics, loss_svg;
  std::optional<double> entropy_floor;
  double peak_flops = 0;
  apps::ProfileFlags profile;
};

void add_flags(CLI::App& app, Args& a, double& floor_flag) {
  apps::add_model_flags(app, a.shape, "preset");
  app.add_option("--train", a.train, "glob of the training shards, e.g. 'data/train_*.bin'")->required();
  app.add_option("--val", a.val, "glob of the validation shards (needed by --eval-every)");
  app.add_option("--batch-size,-b", a.batch_size, "B: sequences per micro-batch per rank")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seq-len,-t", a.seq_len, "T: tokens per sequence")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--total-batch-tokens", a.total_batch_tokens,
                 "tokens per optimizer step over all ranks; gradient accumulation = this / (B*T*world size), "
                 "which must divide (0: B*T*world size, no accumulation)")->check(CLI::NonNegativeNumber);
  app.add_option("--lr", a.lr, "peak learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--min-lr", a.min_lr, "learning rate at the end of the cosine decay")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--warmup-steps", a.warmup_steps, "linear warmup steps, then cosine decay to --min-lr at --steps")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--steps", a.steps, "optimizer steps of the whole run")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--stop-after", a.stop_after,
                 "end this process after step N (checkpointing it; continue with --resume), keeping the --steps "
                 "schedule: for preemptible jobs (0: run to --steps)")->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", a.weight_decay,
                 "AdamW decoupled weight decay of the 2-D (and higher) weights; biases, LayerNorm and other 1-D "
                 "parameters get none (nanoGPT/llm.c). Betas (0.9, 0.95), eps 1e-8")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--grad-clip", a.grad_clip, "clip the global gradient norm to this (0: off)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--dtype", a.dtype, "f32 (or fp32), or autocast to bf16, or f16 (or fp16) with a loss scaler")
      ->transform(apps::dtype_flag(kDTypes))->capture_default_str();
  app.add_option("--eval-every", a.eval_every, "validation loss every N steps and at the end (0: off)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--eval-tokens", a.eval_tokens, "validation tokens per evaluation (over all ranks, from the start "
                 "of the val shards)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--log-every", a.log_every, "print and record the loss every N steps, and at the first and last (each syncs the ranks)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--checkpoint-every", a.checkpoint_every,
                 "write DIR/step_<N>.safetensors every N steps, keeping the last 2 (0: only at the end)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--checkpoint-dir", a.checkpoint_dir,
                 "checkpoint directory; also gets config.json (the model's shape, read by sample_gpt) and the "
                 "final checkpoint");
  app.add_flag("--resume", a.resume, "continue from the latest checkpoint in --checkpoint-dir (model, optimizer, "
               "schedule, RNG, data cursor), if there is one");
  apps::add_memory_flags(app, a.recompute, a.fused_head);
  apps::add_fit_memory_flag(app, a.fit);
  app.add_flag("--cuda-graph", a.cuda_graph, "capture the whole training step as one CUDA graph after 3 eager steps "
               "and replay it (--device cuda, one process, no sharding; the batch goes through static buffers). "
               "Off by default: not yet run on a GPU");
  apps::add_parallel_flags(app, a.parallel, "each transformer block");
  app.add_option("--seed", a.seed, "model init and data order")->capture_default_str();
  app.add_option("--device", a.device, "cpu or cuda (under a launcher each rank takes cuda:LOCAL_RANK)")
      ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--threads", a.threads, "CPU threads per process (0: OMP_NUM_THREADS or all cores)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--metrics", a.metrics, "JSONL file: one object per logged step (step, loss, lr, tokens_per_s, "
                 "mfu, grad_norm, elapsed_s; fp16: skipped, skipped_steps since the last line), one per "
                 "evaluation (val_loss); appended to on --resume");
  app.add_option("--loss-svg", a.loss_svg, "write an SVG loss curve of this run at the end");
  apps::add_profile_flags(app, a.profile);
  app.add_option("--entropy-floor", floor_flag, "the data's entropy floor in nats/token, shown next to the loss "
                 "(default: read from floor.txt next to the --train shards, which kiln-make-shards --synthetic writes)");
  app.add_option("--peak-flops", a.peak_flops, "one rank's peak FLOP/s for MFU; default for cuda: 989e12 (H100/H200 "
                 "dense bf16; half for f32/TF32), for the CPU its f32 peak derived from the CPU (vector width, 2 "
                 "FMA units per core assumed, the threads' cores, the measured clock; printed at the start)");
}

// The loader's next batch for the step printed as `step`: a shard that changed under the run (an
// IOError naming the file and offset, Note [Shards changed under a run]) names the step too.
data::TokenBatch next_batch(data::TokenLoader& loader, int64_t step) {
  try {
    return loader.next();
  } catch (const IOError& e) {
    throw IOError(detail::str_cat(e.what(), " (train_gpt step ", step, ")"));
  }
}

int run(Args a) {
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
  const DType amp = apps::parse_dtype_flag(a.dtype, kDTypes);
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
  std::vector<Tensor> static_x, static_y;  // --cuda-graph: one (B, T) pair per micro-step
  // SIGTERM/SIGINT/SIGUSR1: finish the step, checkpoint, exit 75 (Note [Preemption]; the guard is
  // made first thing in run(), before any thread). With NCCL the ranks agree at log steps, which read
  // the device anyway; on the CPU after every step.
  const int64_t preempt_every = device.is_cuda() && world > 1 ? a.log_every : 1;
  bool preempted = false;
  while (trainer.global_step() < end_step) {
    const int64_t step = trainer.global_step();
    const bool log = step == first_step || (step + 1) % a.log_every == 0 || step + 1 == end_step;
    profiler.begin_step(step);
    dist::StepStats s;
    if (a.cuda_graph) {
      // Note [Whole-step CUDA graph]: the captured step reads the same buffers every step.
      for (int i = 0; i < accum; ++i) {
        data::TokenBatch b = next_batch(train_loader, step + 1);
        if (static_x.size() < size_t(accum)) {
          static_x.push_back(empty(b.x.shape(), b.x.dtype(), device));
          static_y.push_back(empty(b.y.shape(), b.y.dtype(), device));
        }
        static_x[i].copy_(b.x, /*non_blocking=*/true);
        static_y[i].copy_(b.y, /*non_blocking=*/true);
      }
      s = trainer.step([&](int i) { return model->loss(static_x[i], static_y[i]); },
                       dist::StepOptions().items(a.batch_size * a.seq_len * accum).sync_loss(log));
    } else {
      s = trainer.step(
          [&](int) {
            data::TokenBatch b = next_batch(train_loader, step + 1);
            return model->loss(b.x.to(device, /*non_blocking=*/true), b.y.to(device, /*non_blocking=*/true));
          },
          dist::StepOptions().items(a.batch_size * a.seq_len * accum).sync_loss(log));
    }
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
  Args args;
  double floor_flag = std::numeric_limits<double>::quiet_NaN();
  add_flags(app, args, floor_flag);
  return apps::run_main(app, argc, argv, apps::AppMainOptions("train_gpt"), [&] {
    if (!std::isnan(floor_flag)) args.entropy_floor = floor_flag;
    return run(args);
  });
}
