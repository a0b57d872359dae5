// Trainer: the data-parallel training step train_gpt and train_cifar share. It runs gradient
// accumulation (no_sync on all but the last micro-step), autocast, f16 loss scaling with a
// cross-rank overflow check, clipping, the optimizer and the LR schedule, and checkpoints all of it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <kiln/core/arg.h>
#include <kiln/core/dtype.h>
#include <kiln/nn/module.h>
#include <kiln/optim/checkpoint.h>
#include <kiln/optim/grad_scaler.h>
#include <kiln/optim/lr_schedule.h>
#include <kiln/optim/optimizer.h>
#include <kiln/parallel/ddp.h>
#include <kiln/parallel/fsdp.h>
#include <kiln/parallel/mixed_precision_policy.h>
#include <kiln/parallel/process_group.h>
#include <kiln/parallel/sharded_reducer.h>
#include <kiln/parallel/sharding.h>

namespace kiln::dist {

/// Options of Trainer: accumulation, clipping, mixed precision, logging, checkpoints, DDP or
/// sharding, and CUDA graphs.
struct TrainerOptions {
  KILN_ARG(int, grad_accum_steps) = 1;     ///< micro-steps per optimizer step
  KILN_ARG(double, clip_grad_norm) = 0;    ///< max total L2 norm; 0 = no clipping
  KILN_ARG(DType, amp) = DType::f32;       ///< f32: off; bf16: autocast; f16: autocast + GradScaler
  KILN_ARG(int, log_every) = 10;           ///< steps whose loss is averaged across ranks (0: only when asked)
  KILN_ARG(int, checkpoint_every) = 0;     ///< automatic checkpoint every N steps into checkpoint_dir (0: off)
  std::string checkpoint_dir_;
  KILN_ARG(int, keep_last_checkpoints) = 2;  ///< automatic checkpoints kept (0: all)
  /// Called at each automatic checkpoint for the data loader's position after the step (opaque).
  std::function<std::string()> checkpoint_cursor_;
  KILN_ARG(optim::GradScalerOptions, grad_scaler);  ///< used with amp f16
  KILN_ARG(DDPOptions, ddp);
  /// Sharded data parallel (sharding.h): zero1/zero2 wrap the optimizer into a ShardedOptimizer of
  /// the same kind (bucket caps from ddp()); zero2 replaces DDP by a ShardedReducer. Alone (no
  /// group) every mode trains as none. sharded_checkpoints: Note [Sharded checkpoint files] instead
  /// of rank 0 writing the consolidated state.
  /// full: FullyShardedDataParallel with fsdp()'s units (its broadcast_buffers is ddp()'s).
  /// Checkpoints in full mode gather the model one unit at a time. amp f16 works in every mode: the
  /// GradScaler unscales what the optimizer steps from (ShardedOptimizer::step_gradients).
  KILN_ARG(Sharding, sharding) = Sharding::none;
  KILN_ARG(bool, sharded_checkpoints) = false;
  /// Note [Master weights] (sharded_optimizer.h): param_dtype bf16/f16 trains 16-bit parameters and
  /// gradients with f32 master weights and moments only in each rank's shard (all of them under none,
  /// or alone); reduce_dtype is what the gradients are reduced in (f32 needs zero2 or full: DDP
  /// all-reduces the gradients in their own dtype). Needs amp set to param_dtype (autocast keeps
  /// layer norm, softmax and the loss in f32). Default: f32 parameters, today's behaviour.
  KILN_ARG(MixedPrecisionPolicy, mixed_precision);
  KILN_ARG(FSDPOptions, fsdp);
  /// Note [Whole-step CUDA graph] in parallel/trainer_graph.cpp, in the source tree: after cuda_graph_warmup
  /// eager steps, the device work of a whole step (every micro-step's forward and backward, unscale,
  /// clipping, the optimizer, the scale update, zero_grad) is captured once as a CUDA graph and replayed by
  /// every later step: one launch instead of hundreds. Single process on one CUDA device, no sharding;
  /// micro_loss must read its inputs from tensors that stay the same (copy each step's batch into
  /// them before step(): the Trainer calls micro_loss only in the warm-up and the capture), and the
  /// StepStats tensors are the graph's outputs, overwritten by the next step. Off by default.
  KILN_ARG(bool, cuda_graph) = false;
  KILN_ARG(int, cuda_graph_warmup) = 3;  ///< eager steps before the capture (>= 1: lazy state, caches)

  TrainerOptions& checkpoint_dir(std::string v) { checkpoint_dir_ = std::move(v); return *this; }
  TrainerOptions& checkpoint_cursor(std::function<std::string()> v) { checkpoint_cursor_ = std::move(v); return *this; }
};

/// Per-call extras of Trainer::step. Both must be the same on every rank.
struct StepOptions {
  KILN_ARG(int64_t, items) = 0;       ///< tokens or samples this rank processes in the step (for StepStats::items)
  KILN_ARG(bool, sync_loss) = false;  ///< make this a log step: read loss, grad_norm, skipped (Note [Trainer host reads])
};

/// Note [Trainer host reads]
/// Reading a device value on the host synchronizes the device, so a CUDA step would have to wait
/// for the GPU instead of queueing the next one. step() therefore reads nothing on the host except
/// on log steps (step % log_every == 0, or StepOptions::sync_loss); `logged` says which:
///   loss       the mean over micro-steps AND ranks (one all-reduce) on log steps, NaN otherwise;
///              this rank's mean stays on the device in `local_loss` (0-dim f64, detached).
///   grad_norm  the total norm before clipping on log steps; NaN otherwise or when clipping is off.
///              The value stays on the device in `grad_norm_tensor` (0-dim f64; undefined when
///              clipping is off). Gradients are all-reduced first, so it is the same on every rank.
///   skipped    f16: whether the update was skipped because some rank's gradients overflowed, on
///              log steps; false otherwise. `found_inf` (0-dim f32, 1 = skipped, undefined unless f16)
///              holds it on the device: the cross-rank flag the optimizer and the scaler read there.
/// So with f16 the whole step stays on the device: unscale_ records found_inf there, the ranks
/// MAX-reduce that tensor (a collective on the device tensor, no host read), clipping multiplies by
/// a coefficient computed there, the optimizer kernels skip themselves when found_inf is set, and
/// the scaler updates its scale there (Note [GradScaler on CUDA]). On the CPU the same calls run and
/// the reads cost nothing; the values and results are those of the host-read path before.
/// Log steps are also where deferred checks surface: the loss read reports an out-of-range index or
/// target an earlier op recorded on the device (Note [Deferred device checks] in
/// core/cuda/runtime/deferred_check.h, in the source tree), and the DDP's bucket order check is read (Note
/// [Deferred order check] in parallel/order_check.cpp, in the source tree; checkpoints read it too).
/// `seconds` is host time: off log steps step() returns while the GPU still works, and the log step waits for
/// it, so the seconds summed over a log window cover the device's time.
struct StepStats {
  int64_t step = 0;          ///< 0-based index of this optimizer step (global_step() before it)
  double loss = 0;           ///< see Note [Trainer host reads]
  bool logged = false;
  Tensor local_loss;
  double grad_norm = 0;      ///< total norm before clipping (log steps with clipping; else NaN)
  Tensor grad_norm_tensor;
  double lr = 0;             ///< group 0's lr used by this step
  bool skipped = false;      ///< f16, log steps: some rank's gradients overflowed, every rank skipped
  Tensor found_inf;
  int64_t items = 0;         ///< StepOptions::items times the world size (0 when not given)
  double seconds = 0;        ///< wall time of step() on this rank (host time: the GPU may still be busy)
};

/// Usage (README "Multi-process training" has the whole program):
///   Trainer trainer(model, optimizer, group, TrainerOptions().grad_accum_steps(4).amp(DType::bf16),
///                   optim::warmup_cosine_schedule(...));
///   StepStats s = trainer.step([&](int micro) { return cross_entropy(model->forward(x[micro]), y[micro]); });
/// micro_loss(i) must run the model's forward once and return the scalar loss of micro-batch i; the
/// Trainer divides it by grad_accum_steps. With a group of size > 1 the Trainer owns a
/// DistributedDataParallel over the model (constructed here: collective) and calls its
/// prepare_forward() before each micro_loss. Every rank must call step(), save_checkpoint() and
/// load_checkpoint() at the same points. Not copyable; the model and optimizer are shared.
class Trainer {
 public:
  Trainer(std::shared_ptr<nn::Module> model, std::shared_ptr<optim::Optimizer> optimizer,
          std::shared_ptr<ProcessGroup> group, TrainerOptions options = {},
          optim::LRLambda schedule = optim::constant_schedule());
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// One optimizer step: accumulate, synchronize, (unscale + cross-rank inf check), clip, step,
  /// update the scale, advance the schedule, zero_grad (set_to_none; in place with
  /// gradient_as_bucket_view). The schedule and global step advance also when the step was skipped. Then the automatic checkpoint, if one is due.
  StepStats step(const std::function<Tensor(int micro_step)>& micro_loss, StepOptions options = {});

  /// Rank 0 writes model state_dict, optimizer, scheduler and global step, every rank's
  /// default-generator state, the scaler state and `data_cursor` (optim/checkpoint.h format);
  /// then every rank waits at a barrier. Collective.
  void save_checkpoint(const std::string& path, const std::string& data_cursor = "");
  /// Rank 0 removes the oldest step_<N>.safetensors in checkpoint_dir (and their shard files) beyond
  /// keep_last_checkpoints (0: keeps all); the automatic checkpoints do it after each write, and a
  /// loop that writes a final checkpoint itself calls it after that one.
  void prune_checkpoints();
  /// Every rank restores all of the above (its own rank's generator state) and returns the data
  /// cursor; an empty path returns nullopt and changes nothing, so
  /// `load_checkpoint(Trainer::latest_checkpoint(dir))` resumes when there is something to resume.
  std::optional<std::string> load_checkpoint(const std::string& path);
  /// The `step_<N>.safetensors` in `dir` with the largest N; "" when there is none (or no dir).
  static std::string latest_checkpoint(const std::string& dir);
  /// `dir/step_<N>.safetensors`
  static std::string checkpoint_path(const std::string& dir, int64_t step);

  /// Uneven inputs: runs `body` (this rank's loop of step() calls over its own batches) under
  /// DistributedDataParallel::join (Note [Join] in parallel/ddp_join.cpp, in the source tree). A rank whose
  /// body returned shadows the others' steps: their gradient all-reduces (zero contributions), the f16
  /// overflow check and, on log steps, the loss average, which then averages over the ranks still training;
  /// its global step and schedule advance with theirs. At the end every rank holds the weights of the
  /// last rank to finish. Inside join, StepOptions::sync_loss is refused (a finished rank could not
  /// know the step logs) and automatic checkpoints must be off. Collective; just runs `body` alone.
  void join(const std::function<void()>& body, JoinOptions options = {});

  /// Makes every rank's buffers (BatchNorm running statistics) rank 0's, as DDP does before each
  /// forward in step() (DDPOptions::broadcast_buffers; nothing when that is off, or alone). Call it
  /// before running the model outside step(), e.g. an evaluation that counts over all ranks.
  /// Collective.
  void sync_buffers();

  /// Sends DDP's gradient buckets through `hook` (comm_hooks.h; torch's register_comm_hook) instead of
  /// the plain all-reduce. Alone (world 1) there is nothing to reduce and the hook is not called;
  /// sharding zero2 and full reduce-scatter without DDP buckets and refuse a hook. Before the first step.
  void register_comm_hook(CommHook hook);
  template <class State>
  void register_comm_hook(std::shared_ptr<State> state, std::shared_ptr<Work> (*hook)(State&, ProcessGroup&, GradBucket&)) {
    register_comm_hook(with_state(std::move(state), hook));
  }

  /// With cuda_graph: whether the step is captured, and how many steps replayed it.
  bool graph_captured() const;
  int64_t graph_replays() const;  ///< steps replayed from the graph

  bool is_main() const { return rank_ == 0; }  ///< rank 0 (logs, writes checkpoint indexes)
  int rank() const { return rank_; }  ///< this process's rank
  int world_size() const { return world_; }  ///< the number of ranks
  int64_t global_step() const { return global_step_; }  ///< optimizer steps taken (restored by load_checkpoint)
  double lr() const { return optimizer_->lr(0); }  ///< group 0's current learning rate

  nn::Module& model() const { return *model_; }  ///< the model being trained
  optim::Optimizer& optimizer() const { return *optimizer_; }  ///< as passed (or its sharded wrapper)
  optim::LRScheduler& scheduler() { return scheduler_; }  ///< the schedule, stepped by step()
  optim::GradScaler& grad_scaler() { return scaler_; }  ///< disabled unless amp is f16
  DistributedDataParallel* ddp() const { return ddp_.get(); }  ///< null without DDP
  /// null unless sharded or keeping master weights (Note [Master weights]; replicating under none)
  ShardedOptimizer* sharded_optimizer() const { return sharded_.get(); }
  FullyShardedDataParallel* fsdp() const { return fsdp_.get(); }          ///< null unless sharding full
  const TrainerOptions& options() const { return options_; }  ///< as constructed

 private:
  /// What a step's device work leaves for the host side: this rank's mean loss (0-dim f64), the
  /// norm before clipping (undefined without clipping), f16's skip flag (undefined without f16).
  struct DeviceStep {
    Tensor loss, grad_norm, found_inf;
  };
  DeviceStep run_device_step(const std::function<Tensor(int micro_step)>& micro_loss);
  DeviceStep graph_device_step(const std::function<Tensor(int micro_step)>& micro_loss);  ///< trainer_graph.cpp
  void check_graph_supported() const;
  void reset_graph();  ///< after load_checkpoint: the optimizer's buffers are new tensors
  void check_graph_faults();  ///< log steps: the captured ops' device checks (Note [Deferred device checks] in core/cuda/runtime/deferred_check.h, in the source tree, in the source tree)
  struct GraphState;
  std::unique_ptr<GraphState> graph_;

  bool any_rank(bool local);                          ///< OR over ranks (collective, host values)
  Tensor any_rank_found_inf(const Tensor& local);     ///< MAX over ranks of a flag, on its device (collective)
  double average_across_ranks(const Tensor& local);  ///< 0-dim f64 -> mean over ranks (collective)
  std::vector<optim::RngState> gather_rng_states();  ///< every rank's default generator (collective)
  void checkpoint_if_due();
  void shadow_step();                                 ///< Note [Join] in parallel/ddp_join.cpp, in the source tree, in the source
                                                      ///< tree: a finished rank's side of one step
  bool log_step(int64_t step) const { return options_.log_every_ > 0 && step % options_.log_every_ == 0; }

  std::shared_ptr<nn::Module> model_;
  std::shared_ptr<optim::Optimizer> optimizer_;     ///< zero1/zero2: the ShardedOptimizer
  std::shared_ptr<ShardedOptimizer> sharded_;       ///< null unless the optimizer is sharded
  std::shared_ptr<ProcessGroup> group_;  ///< null when single-process
  TrainerOptions options_;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::shared_ptr<ShardedReducer> sharded_reducer_;   ///< zero2
  std::shared_ptr<FullyShardedDataParallel> fsdp_;    ///< full
  optim::LRScheduler scheduler_;
  optim::GradScaler scaler_;
  int64_t global_step_ = 0;
  bool joining_ = false;  ///< inside join()
};

}  // namespace kiln::dist
