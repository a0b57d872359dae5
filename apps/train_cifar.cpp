// train_cifar: trains models::CifarCnn on CIFAR-10 (the official binary batches, or the synthetic
// CIFAR-shaped set) with dist::Trainer, on one process or many (kiln-run / torchrun / srun / mpirun:
// DDP over Gloo or NCCL), evaluating test accuracy every epoch. Flags: train_cifar --help; README
// "Training on CIFAR-10".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include <kiln/core/ops/ops.h>  // raw ops on tensors that need no gradient
#include <kiln/kiln.h>

#include "cifar/cifar_data.h"
#include "cifar/cifar_eval.h"
#include "cifar/cifar_metrics.h"
#include "cifar/cifar_optim.h"
#include "common/app_main.h"
#include "common/dtype_flag.h"
#include "common/duration.h"
#include "common/job.h"
#include "common/metrics_writer.h"
#include "common/parallel_flags.h"
#include "common/profiling.h"

using namespace kiln;

namespace {

struct Args {
  std::string data_dir, model = "standard";
  bool synthetic = false, resume = false, sync_bn = false;
  int64_t train_size = 0, test_size = 0;  // 0: all (synthetic: 50000 and 10000)
  int64_t epochs = 10, batch_size = 512, workers = 2, checkpoint_every = 1, stop_after_epoch = 0;
  int64_t eval_batch_size = 500;
  int grad_accum = 1, threads = 0, log_every = 10;
  std::string optimizer = "sgd", schedule = "linear";
  double lr = 0.2, weight_decay = 5e-4, momentum = 0.9, label_smoothing = 0.2, warmup_epochs = 0.5;
  std::string dtype = "f32", device = "cpu", backend = "auto";
  apps::ParallelFlags parallel;
  uint64_t seed = 0;
  std::string checkpoint_dir, metrics, acc_svg;
  apps::ProfileFlags profile;
};

void add_flags(CLI::App& app, Args& a) {
  app.add_option("--data", a.data_dir, "folder with the official binary batches (cifar-10-batches-bin); "
                                       "without it the synthetic CIFAR-shaped set is used");
  app.add_flag("--synthetic", a.synthetic, "use the synthetic set even when --data is given");
  app.add_option("--train-size", a.train_size, "training images: the first N of the split (synthetic: N generated); 0 = all/50000")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--test-size", a.test_size, "test images, likewise; 0 = all/10000")->check(CLI::NonNegativeNumber);
  app.add_option("--model", a.model, "standard (64/256/256 channels) or tiny (16/32/32)")
      ->check(CLI::IsMember({"standard", "tiny"}));
  app.add_option("--epochs", a.epochs, "training epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", a.batch_size, "global batch (all ranks); each rank takes batch-size / world-size")
      ->check(CLI::PositiveNumber);
  app.add_option("--grad-accum", a.grad_accum, "micro-steps per optimizer step on each rank; micro-step m takes "
                                               "every grad-accum-th image of the rank's batch from m, as ranks do")
      ->check(CLI::PositiveNumber);
  app.add_option("--optimizer", a.optimizer, "sgd (Nesterov, --momentum) or adamw")->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--lr", a.lr, "peak learning rate (default 0.2 for sgd, 2e-3 for adamw)")->check(CLI::PositiveNumber);
  app.add_option("--weight-decay", a.weight_decay, "weight decay: L2 for sgd (default 5e-4), decoupled for adamw (default 0.05)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--momentum", a.momentum, "sgd Nesterov momentum")->check(CLI::Range(0.0, 1.0));
  app.add_option("--label-smoothing", a.label_smoothing, "cross-entropy label smoothing (airbench: 0.2)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--schedule", a.schedule, "after warmup the lr decays to 0 at the last step: linear or cosine")
      ->check(CLI::IsMember({"linear", "cosine"}));
  app.add_option("--warmup-epochs", a.warmup_epochs, "linear warmup from lr/warmup_steps to lr, in epochs (fractions ok)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dtype", a.dtype, "f32 (or fp32), or bf16 autocast (BatchNorm stays f32)")
      ->transform(apps::dtype_flag({DType::f32, DType::bf16}))->capture_default_str();
  app.add_option("--device", a.device, "cpu, or cuda (device LOCAL_RANK)")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--backend", a.backend, "process group backend under a launcher: auto, gloo or nccl")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}));
  app.add_option("--workers", a.workers, "DataLoader worker threads (0: batches built on the training thread)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", a.seed, "seeds the weights, the shuffling and the augmentation");
  app.add_option("--checkpoint-dir", a.checkpoint_dir, "where step_<N>.safetensors checkpoints go");
  app.add_option("--checkpoint-every", a.checkpoint_every, "checkpoint every N epochs (with --checkpoint-dir)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--sync-bn", a.sync_bn, "SyncBatchNorm: batch statistics over every rank's images together "
                                      "(dist::convert_sync_batchnorm; no effect alone)");
  apps::add_parallel_flags(app, a.parallel, "each conv group (the head in the root)");
  app.add_flag("--resume", a.resume, "continue from the latest checkpoint in --checkpoint-dir (fresh start when there is none)");
  app.add_option("--stop-after-epoch", a.stop_after_epoch, "end the run after this epoch as if interrupted (the LR "
                                                           "schedule still spans --epochs); 0 = run to the end")
      ->check(CLI::NonNegativeNumber);
  apps::add_profile_flags(app, a.profile);
  app.add_option("--metrics", a.metrics, "JSONL file, one line per epoch: epoch, step, train_loss, test_accuracy, "
                                         "images_per_s, elapsed_s, lr (rank 0 writes it)");
  app.add_option("--acc-svg", a.acc_svg, "SVG plot of test accuracy per epoch, written at the end (rank 0)");
  app.add_option("--threads", a.threads, "CPU threads for the ops (default: OMP_NUM_THREADS or all cores)")
      ->check(CLI::PositiveNumber);
  app.add_option("--log-every", a.log_every, "steps between progress updates (loss averaged across ranks)")
      ->check(CLI::PositiveNumber);
  app.add_option("--eval-batch-size", a.eval_batch_size, "test images per forward in evaluation")
      ->check(CLI::PositiveNumber);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(const Args& a) {
  dist::PreemptionGuard preemption;  // before any thread starts (Note [Signals and oneDNN])
  if (a.threads > 0) set_num_threads(a.threads);
  // Alone, or one rank of the job kiln-run, torchrun, srun or mpirun started (dist::launched()).
  const apps::Job job = apps::join_job(apps::JobOptions().device(a.device).backend(a.backend));
  const Device device = job.device;
  KILN_CHECK(a.batch_size % job.world == 0, "--batch-size ", a.batch_size, " is not divisible by the world size ", job.world);
  const int64_t per_rank = a.batch_size / job.world;
  KILN_CHECK(per_rank % a.grad_accum == 0, "the per-rank batch ", per_rank, " is not divisible by --grad-accum ",
             a.grad_accum);
  const int64_t micro = per_rank / a.grad_accum;
  const DType amp = apps::parse_dtype_flag(a.dtype, {DType::f32, DType::bf16});

  auto [train_set, test_set] = apps::load_cifar_splits({a.data_dir, a.synthetic, a.train_size, a.test_size}, job.main());
  auto train = std::make_shared<const data::Cifar10Dataset>(train_set);
  data::DistributedSampler sampler(train->size(), job.world, job.rank, /*shuffle=*/true, a.seed);
  const int64_t steps_per_epoch = sampler.num_samples() / per_rank;
  KILN_CHECK(steps_per_epoch > 0, "each rank has ", sampler.num_samples(), " training images, fewer than its batch ",
             per_rank, ": lower --batch-size or raise --train-size");
  const int64_t total_steps = steps_per_epoch * a.epochs;
  const int64_t warmup = std::min<int64_t>(int64_t(std::llround(a.warmup_epochs * double(steps_per_epoch))), total_steps - 1);

  Generator gen(a.seed);
  auto config = a.model == "tiny" ? models::CifarCnnConfig::tiny() : models::CifarCnnConfig::standard();
  auto model = std::make_shared<models::CifarCnn>(config, gen);
  if (a.sync_bn && job.world > 1) dist::convert_sync_batchnorm(*model, job.group);
  model->to(device);
  auto optimizer = apps::make_cifar_optimizer({a.optimizer, a.lr, a.momentum, a.weight_decay}, model->parameters());
  dist::Trainer trainer(model, optimizer, job.group,
                        apps::with_parallel_flags(dist::TrainerOptions(), a.parallel)
                            .amp(amp).log_every(a.log_every).grad_accum_steps(a.grad_accum)
                            .fsdp(dist::FSDPOptions().wrap({"CifarConvGroup"})),
                        apps::make_cifar_schedule(a.schedule, warmup, total_steps));
  apps::register_comm_hook(trainer, a.parallel, a.seed);

  apps::EpochCursor resumed;  // epochs done, and steps done in the next one (a preempted run)
  if (a.resume) {
    KILN_CHECK(!a.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
    const std::string path = apps::agreed_checkpoint(job, a.checkpoint_dir);
    if (auto cursor = trainer.load_checkpoint(path)) {
      resumed = apps::parse_epoch_cursor(*cursor, path);
      KILN_CHECK(resumed.batch <= steps_per_epoch, "checkpoint ", path, " was saved after step ", resumed.batch,
                 " of an epoch of ", steps_per_epoch, " steps: resume with the --batch-size and --train-size it had");
      if (job.main())
        std::printf("resumed from %s: epoch %lld, step %lld\n", path.c_str(), (long long)resumed.epoch,
                    (long long)trainer.global_step());
    } else if (job.main()) {
      std::printf("no checkpoint in %s common to all ranks: starting from scratch\n", a.checkpoint_dir.c_str());
    }
  }
  // Note [Resume-safe metrics]: a resumed run's file is cut back to the checkpoint's step.
  apps::MetricsWriter metrics(job.main() ? a.metrics : std::string(), trainer.global_step());
  std::vector<apps::EpochMetrics> history;
  for (const auto& line : metrics.kept()) history.push_back(apps::epoch_metrics_from_json(line));
  if (job.main())
    std::printf("train_cifar: %s model, %lld train / %lld test images, %d rank(s) x batch %lld (micro %lld), %lld steps/epoch, "
                "%s lr %g, %s%s, %d thread(s)\n",
                a.model.c_str(), (long long)train->size(), (long long)test_set.size(), job.world, (long long)per_rank,
                (long long)micro, (long long)steps_per_epoch, a.optimizer.c_str(), a.lr, a.dtype.c_str(),
                a.sync_bn && job.world > 1 ? ", SyncBatchNorm" : "", num_threads());
  if (job.main() && !job.device.is_cuda()) std::printf("%s\n", cpu::capability_summary().c_str());

  const bool live = job.main() && isatty(fileno(stderr));
  const auto run_start = std::chrono::steady_clock::now();
  const int64_t steps_at_start = trainer.global_step();
  const int64_t last_epoch = a.stop_after_epoch > 0 ? std::min(a.stop_after_epoch, a.epochs) : a.epochs;
  const auto ce = CrossEntropyOptions().label_smoothing(a.label_smoothing);
  apps::StepProfiler profiler(a.profile, job.group, device);  // steps count across epochs (global steps)
  const double elapsed_before = resumed.elapsed_s;
  // SIGTERM/SIGINT/SIGUSR1: finish the step, checkpoint it with the position in the epoch, exit 75
  // (Note [Preemption]). With NCCL the ranks agree at log steps, which read the device anyway; on
  // the CPU after every step.
  const int64_t preempt_every = device.is_cuda() && job.world > 1 ? a.log_every : 1;
  for (int64_t epoch = resumed.epoch; epoch < last_epoch; ++epoch) {
    sampler.set_epoch(epoch);
    // A run preempted inside this epoch resumes after its last step: the same batches, minus those done.
    const int64_t skipped = epoch == resumed.epoch ? resumed.batch : 0;
    std::vector<int64_t> order = apps::interleave_micro_batches(sampler.indices(), per_rank, a.grad_accum);
    order.erase(order.begin(), order.begin() + skipped * per_rank);
    // Augmentation is keyed by the dataset index only (rank 0's key on every rank), so an image is
    // augmented the same way whatever the world size.
    data::DataLoader loader(std::move(order),
                            data::cifar10_batches(train, data::AugmentOptions().seed(a.seed), epoch, /*rank=*/0),
                            data::DataLoaderOptions(per_rank).num_workers(a.workers).drop_last(true)
                                .pin_memory(device.is_cuda()).device(device));
    const auto epoch_start = std::chrono::steady_clock::now();
    Tensor loss_sum = full({}, skipped > 0 ? resumed.loss_sum : 0.0, TensorOptions().dtype(DType::f64).device(device));
    double last_loss = NAN;
    int64_t stopped_after = -1;  // steps of this epoch done when a signal stopped the run
    while (auto batch = loader.next()) {
      const Tensor& x = batch->inputs;  // on `device` already (uploaded by the loader)
      const Tensor& y = batch->targets;
      const int64_t step = trainer.global_step();
      profiler.begin_step(step);
      dist::StepStats stats = trainer.step(
          [&](int m) { return cross_entropy(model->forward(x.slice(0, m * micro, (m + 1) * micro)),
                                            y.slice(0, m * micro, (m + 1) * micro), ce); },
          dist::StepOptions().items(per_rank));
      profiler.end_step(step);
      {
        NoGradGuard no_grad;
        loss_sum = ops::add(loss_sum, stats.local_loss.to(DType::f64));
      }
      if (stats.logged) last_loss = stats.loss;
      if (live && stats.logged) {
        const int64_t done = trainer.global_step() - steps_at_start;
        const double t = seconds_since(run_start), rate = double(done * a.batch_size) / t;
        const double eta = t / double(done) * double(last_epoch * steps_per_epoch - trainer.global_step());
        apps::print_progress(epoch + 1, a.epochs, skipped + batch->index + 1, steps_per_epoch, last_loss, rate, eta);
      }
      if (preemption.stop_requested(job.group.get(), step, preempt_every)) {
        stopped_after = skipped + batch->index + 1;
        break;
      }
    }
    if (stopped_after >= 0) {
      // Every rank stops after the same step (stop_requested is collective); the epoch's loss so far
      // goes into the cursor as the mean over ranks, which is what the epoch's end averages anyway.
      if (job.world > 1) job.group->allreduce(loss_sum, dist::AllreduceOptions().op(dist::ReduceOp::avg))->wait();
      const apps::EpochCursor cursor{epoch, elapsed_before + seconds_since(run_start), stopped_after, loss_sum.item()};
      const std::string path = dist::Trainer::checkpoint_path(a.checkpoint_dir, trainer.global_step());
      if (!a.checkpoint_dir.empty()) trainer.save_checkpoint(path, apps::epoch_cursor(cursor));
      profiler.finish();
      if (job.main()) {
        if (live) std::fprintf(stderr, "\r%*s\r", 100, "");
        std::printf("train_cifar: stopped by a signal after step %lld (epoch %lld, step %lld of %lld)%s; exit status "
                    "%d (resume with --resume)\n",
                    (long long)trainer.global_step(), (long long)epoch + 1, (long long)stopped_after,
                    (long long)steps_per_epoch,
                    a.checkpoint_dir.empty() ? " (no --checkpoint-dir: nothing saved)" : (", checkpoint " + path).c_str(),
                    dist::kPreemptedExitStatus);
      }
      std::fflush(stdout);
      return dist::kPreemptedExitStatus;
    }
    const double train_seconds = seconds_since(epoch_start);
    Tensor mean_loss = ops::div(loss_sum, double(steps_per_epoch));  // on `device`, the group's device
    if (job.world > 1) job.group->allreduce(mean_loss, dist::AllreduceOptions().op(dist::ReduceOp::avg))->wait();
    trainer.sync_buffers();  // rank 0's BatchNorm buffers everywhere
    apps::EvalCounts counts = apps::evaluate(*model, test_set, job.group.get(), a.eval_batch_size, amp, device);

    const apps::EpochMetrics m{epoch + 1, trainer.global_step(), mean_loss.item(), counts.accuracy(), counts.correct,
                               counts.total, double((steps_per_epoch - skipped) * a.batch_size) / train_seconds,
                               elapsed_before + seconds_since(run_start), trainer.lr()};
    if (job.main()) {
      if (live) std::fprintf(stderr, "\r%*s\r", 100, "");
      apps::print_epoch(m, a.epochs);
      metrics.write(apps::to_json(m));
      history.push_back(m);
    }
    if (!a.checkpoint_dir.empty() && (m.epoch % a.checkpoint_every == 0 || m.epoch == last_epoch)) {
      trainer.save_checkpoint(dist::Trainer::checkpoint_path(a.checkpoint_dir, trainer.global_step()),
                              apps::epoch_cursor({m.epoch, m.elapsed_s}));
    }
  }
  profiler.finish();
  if (job.main() && !a.acc_svg.empty())
    apps::write_accuracy_svg(a.acc_svg, history,
                             "train_cifar: " + a.model + " model" + (a.data_dir.empty() || a.synthetic ? " (synthetic data)" : ""));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"train_cifar: train the CIFAR-10 CNN (one process, or DDP under kiln-run / torchrun / srun / mpirun). "
               "SIGTERM, SIGINT or SIGUSR1 (SLURM's --signal): the ranks finish the step, checkpoint it "
               "(--checkpoint-dir) and exit 75; --resume continues inside the epoch with no step lost; a second "
               "SIGTERM/SIGINT ends it at once."};
  Args a;
  add_flags(app, a);
  return apps::run_main(app, argc, argv, apps::AppMainOptions("train_cifar"), [&] {
    if (a.optimizer == "adamw") {  // per-optimizer defaults for flags left unset
      if (app.count("--lr") == 0) a.lr = 2e-3;
      if (app.count("--weight-decay") == 0) a.weight_decay = 0.05;
    }
    return run(a);
  });
}
