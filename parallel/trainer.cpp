// Trainer: one optimizer step as DESIGN.md's data path describes it (accumulate under no_sync,
// finish the bucket all-reduces, unscale + cross-rank inf check, clip, step, schedule) without a
// host read off log steps (Note [Trainer host reads]), and checkpoints that rank 0 writes and
// every rank restores.
#include <kiln/parallel/trainer.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <utility>
#include <vector>

#include <kiln/autograd/autograd.h>
#include <kiln/core/autocast.h>
#include <kiln/core/error.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/join.h>
#include <kiln/core/generator.h>
#include <kiln/core/profiler/profiler.h>
#include <kiln/optim/checkpoint.h>
#include <kiln/optim/clip.h>
#include <kiln/parallel/sharded_checkpoint.h>
#include <kiln/parallel/trainer_graph.h>

namespace kiln::dist {

namespace {

namespace fs = std::filesystem;

constexpr const char* kScalerPrefix = "grad_scaler.";

// N of "step_<N>.safetensors", or -1 for any other name.
int64_t checkpoint_step_of(const std::string& name) {
  const std::string head = "step_", tail = ".safetensors";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return -1;
  std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

// Every step_<N>.safetensors in `dir`, by increasing N.
std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    int64_t step = checkpoint_step_of(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file(ec)) out.emplace_back(step, entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

optim::Optimizer& non_null(const std::shared_ptr<optim::Optimizer>& optimizer) {
  KILN_CHECK(optimizer != nullptr, "Trainer: the optimizer is null");
  return *optimizer;
}

std::vector<Tensor> optimizer_params(const optim::Optimizer& optimizer) {
  std::vector<Tensor> out;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
    for (const Tensor& p : optimizer.params(g)) out.push_back(p);
  return out;
}

// zero1/zero2/full (with a group): the optimizer rebuilt over shards (sharding.h), unless it is one;
// full: one bucket per FSDP unit (fsdp.h).
// A 16-bit policy (Note [Master weights]) shards or replicates in every mode, alone too.
std::shared_ptr<optim::Optimizer> maybe_shard(std::shared_ptr<optim::Optimizer> optimizer,
                                              const std::shared_ptr<ProcessGroup>& group, const TrainerOptions& o,
                                              const std::shared_ptr<nn::Module>& model) {
  const MixedPrecisionPolicy& policy = o.mixed_precision_;
  const bool master = policy.keeps_16bit_parameters();
  if (auto sharded = std::dynamic_pointer_cast<ShardedOptimizer>(optimizer)) {
    KILN_CHECK_VALUE(sharded->keeps_master_weights() == master && (!master || sharded->mixed_precision().param_dtype_ ==
                     policy.param_dtype_), "Trainer: the ShardedOptimizer passed in was built with param_dtype ",
                     sharded->mixed_precision().param_dtype_, " but TrainerOptions::mixed_precision asks for ",
                     policy.param_dtype_);
    return optimizer;
  }
  const Sharding sharding = group ? o.sharding_ : Sharding::none;
  if (!optimizer || (sharding == Sharding::none && !master)) return optimizer;
  if (sharding == Sharding::none)
    return shard_optimizer(*optimizer, group, ShardedOptimizerOptions().mixed_precision(policy).replicate(true));
  if (sharding == Sharding::full) {
    KILN_CHECK(model != nullptr, "Trainer: the model is null");
    return shard_optimizer(*optimizer, group,
                           fsdp_optimizer_options(*model, *optimizer, o.fsdp_).mixed_precision(policy));
  }
  return shard_optimizer(*optimizer, group, ShardedOptimizerOptions()
                                                .bucket_cap_mb(o.ddp_.bucket_cap_mb_)
                                                .first_bucket_cap_mb(o.ddp_.first_bucket_cap_mb_)
                                                .mixed_precision(policy));
}

// Before anything is built: a policy the Trainer cannot honour fails naming why.
const TrainerOptions& checked_policy(const TrainerOptions& o, const std::shared_ptr<ProcessGroup>& group) {
  const MixedPrecisionPolicy& p = o.mixed_precision_;
  p.check();
  const MixedPrecisionPolicy& f = o.fsdp_.mixed_precision_;
  KILN_CHECK_VALUE(!f.keeps_16bit_parameters() || (f.param_dtype_ == p.param_dtype_ &&
                   f.effective_reduce_dtype() == p.effective_reduce_dtype()), "Trainer: FSDPOptions::mixed_precision "
                   "(param_dtype ", f.param_dtype_, ") differs from TrainerOptions::mixed_precision (param_dtype ",
                   p.param_dtype_, "); the Trainer takes TrainerOptions::mixed_precision: set that one");
  if (!p.keeps_16bit_parameters()) return o;
  KILN_CHECK_VALUE(o.amp_ == p.param_dtype_, "Trainer: mixed_precision param_dtype ", p.param_dtype_,
                   " needs amp ", p.param_dtype_, " (autocast keeps layer norm, softmax and the loss in f32 over the "
                   "16-bit parameters), got amp ", o.amp_);
  const Sharding sharding = group ? o.sharding_ : Sharding::none;
  KILN_CHECK_VALUE(p.effective_reduce_dtype() == p.param_dtype_ || sharding == Sharding::zero2 ||
                   sharding == Sharding::full || !group || group->size() == 1,
                   "Trainer: mixed_precision reduce_dtype ", p.effective_reduce_dtype(), " with param_dtype ",
                   p.param_dtype_, " needs sharding zero2 or full (they reduce-scatter into a gradient shard kept in "
                   "reduce_dtype); under ", sharding_name(sharding), " DDP all-reduces the gradients in their own dtype");
  KILN_CHECK_VALUE(!o.cuda_graph_, "Trainer: cuda_graph with a 16-bit mixed_precision policy is not supported");
  return o;
}

}  // namespace

Trainer::Trainer(std::shared_ptr<nn::Module> model, std::shared_ptr<optim::Optimizer> optimizer,
                 std::shared_ptr<ProcessGroup> group, TrainerOptions options, optim::LRLambda schedule)
    : model_(std::move(model)),
      optimizer_(maybe_shard(std::move(optimizer), group, checked_policy(options, group), model_)),
      sharded_(std::dynamic_pointer_cast<ShardedOptimizer>(optimizer_)),
      group_(std::move(group)),
      options_(std::move(options)),
      scheduler_(non_null(optimizer_), 
                 schedule ? std::move(schedule) : optim::constant_schedule()),
      scaler_(optim::GradScalerOptions(options_.grad_scaler_).enabled(options_.amp_ == DType::f16)) {
  KILN_CHECK(model_ != nullptr, "Trainer: the model is null");
  KILN_CHECK(options_.grad_accum_steps_ >= 1, "Trainer: grad_accum_steps must be >= 1, got ",
             options_.grad_accum_steps_);
  KILN_CHECK(options_.clip_grad_norm_ >= 0 && std::isfinite(options_.clip_grad_norm_),
             "Trainer: clip_grad_norm must be finite and >= 0 (0 = off), got ", options_.clip_grad_norm_);
  KILN_CHECK(options_.amp_ == DType::f32 || options_.amp_ == DType::bf16 || options_.amp_ == DType::f16,
             "Trainer: amp must be f32 (off), bf16 or f16, got ", options_.amp_);
  KILN_CHECK(options_.log_every_ >= 0, "Trainer: log_every must be >= 0, got ", options_.log_every_);
  KILN_CHECK(options_.checkpoint_every_ >= 0, "Trainer: checkpoint_every must be >= 0, got ",
             options_.checkpoint_every_);
  KILN_CHECK(options_.checkpoint_every_ == 0 || !options_.checkpoint_dir_.empty(),
             "Trainer: checkpoint_every is ", options_.checkpoint_every_, " but checkpoint_dir is empty");
  KILN_CHECK(options_.keep_last_checkpoints_ >= 0, "Trainer: keep_last_checkpoints must be >= 0, got ",
             options_.keep_last_checkpoints_);
  KILN_CHECK(options_.cuda_graph_warmup_ >= 1, "Trainer: cuda_graph_warmup must be >= 1 (the eager steps before "
             "the capture create the optimizer's state and warm the caches), got ", options_.cuda_graph_warmup_);
  if (group_) {
    rank_ = group_->rank();
    world_ = group_->size();
  }
  const Sharding sharding = group_ ? options_.sharding_ : Sharding::none;
  if (sharding == Sharding::full)
    fsdp_ = FullyShardedDataParallel::create(model_, sharded_,
                                             FSDPOptions(options_.fsdp_).broadcast_buffers(options_.ddp_.broadcast_buffers_));
  else if (sharding == Sharding::zero2)
    sharded_reducer_ = ShardedReducer::create(sharded_, model_);
  else if (world_ > 1)
    ddp_ = std::make_unique<DistributedDataParallel>(model_, group_, options_.ddp_);
  if (options_.cuda_graph_) check_graph_supported();
}

StepStats Trainer::step(const std::function<Tensor(int micro_step)>& micro_loss, StepOptions options) {
  profiler::Range range("step", profiler::Category::step, {"step", global_step_});
  const auto start = std::chrono::steady_clock::now();
  KILN_CHECK(!joining_ || !options.sync_loss_, "Trainer::step: StepOptions::sync_loss is not supported inside "
             "join() (a rank that ran out of batches could not tell the step logs); use log_every");
  StepStats stats;
  stats.step = global_step_;
  stats.lr = optimizer_->lr(0);

  const DeviceStep device_step = options_.cuda_graph_ ? graph_device_step(micro_loss) : run_device_step(micro_loss);
  stats.local_loss = device_step.loss;
  stats.grad_norm_tensor = device_step.grad_norm;
  stats.found_inf = device_step.found_inf;
  scheduler_.step();
  ++global_step_;

  const double nan = std::numeric_limits<double>::quiet_NaN();
  stats.logged = options.sync_loss_ || log_step(stats.step);
  stats.loss = stats.logged ? average_across_ranks(stats.local_loss) : nan;
  stats.grad_norm = stats.logged && stats.grad_norm_tensor.defined() ? stats.grad_norm_tensor.item() : nan;
  stats.skipped = stats.logged && stats.found_inf.defined() && stats.found_inf.item() != 0.0;
  if (stats.logged && ddp_) ddp_->check_collective_order();  // Note [Deferred order check] (order_check.cpp)
  if (stats.logged) check_graph_faults();
  stats.items = options.items_ * world_;
  checkpoint_if_due();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

Trainer::DeviceStep Trainer::run_device_step(const std::function<Tensor(int micro_step)>& micro_loss) {
  const int k = options_.grad_accum_steps_;
  const bool autocast = options_.amp_ != DType::f32;
  const bool f16 = options_.amp_ == DType::f16;
  DeviceStep out;
  Tensor loss_sum;  // f64, detached: this rank's sum of micro-step losses
  for (int i = 0; i < k; ++i) {
    // Note [When gradients are final] (reducer.h): only the last micro-step's backward reduces.
    std::optional<DistributedDataParallel::NoSyncGuard> no_sync;
    if (ddp_ && i + 1 < k) no_sync.emplace(*ddp_);
    if (ddp_) ddp_->prepare_forward();
    if (fsdp_) {  // Note [FSDP gradient accumulation]: no_sync accumulates unsharded .grad
      fsdp_->set_require_backward_grad_sync(i + 1 == k);
      fsdp_->prepare_forward();
    }
    if (sharded_reducer_) {  // Note [ZeRO-2 gradients]: no_sync accumulates unsharded .grad
      sharded_reducer_->set_require_backward_grad_sync(i + 1 == k);
      if (options_.ddp_.broadcast_buffers_) sharded_reducer_->broadcast_buffers();
    }
    Tensor loss;
    {
      AutocastGuard guard(autocast ? options_.amp_ : DType::bf16, autocast);
      profiler::Range forward("forward", profiler::Category::step, {"micro_step", i});
      loss = micro_loss(i);
    }
    KILN_CHECK(loss.defined(), "Trainer::step: micro_loss(", i, ") returned an undefined tensor");
    if (ddp_) ddp_->prepare_for_backward({loss});  // Note [Unused parameters] (reducer.cpp)
    KILN_CHECK(loss.numel() == 1, "Trainer::step: micro_loss(", i, ") must return a one-element loss, got shape ",
               loss.shape());
    Tensor scaled = k == 1 ? loss : loss * (1.0 / k);
    scaler_.scale(scaled).backward();
    NoGradGuard no_grad;
    Tensor value = loss.detach().to(DType::f64).reshape({});
    loss_sum = loss_sum.defined() ? loss_sum + value : value;
  }
  if (ddp_) ddp_->finish_gradient_synchronization();
  if (sharded_reducer_) sharded_reducer_->finish();
  if (fsdp_) fsdp_->finish();

  // Note [Trainer host reads]: nothing below reads a device value unless this is a log step.
  if (f16) {
    scaler_.unscale_(*optimizer_);
    scaler_.set_found_inf(any_rank_found_inf(scaler_.found_inf_tensor()));
  }
  if (options_.clip_grad_norm_ > 0 && sharded_)
    out.grad_norm = sharded_->clip_grad_norm(options_.clip_grad_norm_);  // global norm across shards
  else if (options_.clip_grad_norm_ > 0)
    out.grad_norm = optim::clip_grad_norm_tensor(optimizer_params(*optimizer_), options_.clip_grad_norm_);
  if (f16) {
    out.found_inf = scaler_.step_async(*optimizer_);
    scaler_.update();
  } else {
    optimizer_->step();
  }
  // With gradient_as_bucket_view .grad is its bucket slice: zero it in place so the next backward
  // accumulates straight into the bucket (setting it to none would cost a copy per parameter per
  // step to put the view back; Note [Bucket views]).
  const bool views = ddp_ && ddp_->options().gradient_as_bucket_view_;
  optimizer_->zero_grad(/*set_to_none=*/!views);
  NoGradGuard no_grad;
  out.loss = k == 1 ? loss_sum : loss_sum * (1.0 / k);
  return out;
}

bool Trainer::any_rank(bool local) {
  if (world_ == 1) return local;
  Tensor flag = full({1}, local ? 1.0 : 0.0, TensorOptions(DType::f32).device(device_of(*model_)));
  group_->allreduce(flag, AllreduceOptions().op(ReduceOp::max))->wait();
  return flag.item() > 0;
}

Tensor Trainer::any_rank_found_inf(const Tensor& local) {
  if (world_ == 1) return local;
  // A fresh one-element tensor where the group communicates: on CUDA the scaler's flag is there
  // already, so this is a view, and NCCL's wait() only makes the current stream wait.
  Tensor flag = local.to(device_of(*model_)).reshape({1});
  group_->allreduce(flag, AllreduceOptions().op(ReduceOp::max))->wait();
  return flag;
}

double Trainer::average_across_ranks(const Tensor& local) {
  if (world_ == 1) return local.item();
  if (joining_) {  // Note [Join]: (loss, 1) here, (0, 0) from ranks that ran out (shadow_step)
    Tensor pair = ops::cat({local.reshape({1}).to(DType::f64), ones({1}, TensorOptions(DType::f64).device(local.device()))}, 0);
    group_->allreduce(pair)->wait();
    std::vector<double> v = pair.to_vector<double>();
    return v[0] / v[1];
  }
  Tensor sum = local.reshape({1}).clone();
  group_->allreduce(sum)->wait();
  return sum.item() / world_;
}

void Trainer::join(const std::function<void()>& body, JoinOptions options) {
  KILN_CHECK(body != nullptr, "Trainer::join: the body is empty");
  if (!ddp_ || !options.enable_) {
    body();
    return;
  }
  KILN_CHECK(options_.checkpoint_every_ == 0, "Trainer::join: automatic checkpoints (checkpoint_every ",
             options_.checkpoint_every_, ") are not supported on uneven inputs; save after join() returns");
  KILN_CHECK(!joining_, "Trainer::join: already inside join()");
  joining_ = true;
  try {
    ddp_->join(body, options, [this] { shadow_step(); });
  } catch (...) {
    joining_ = false;
    throw;
  }
  joining_ = false;
}

// What step() issues after the synced backward, with nothing to contribute: the f16 overflow
// flag (MAX with 0) and, on log steps, the loss pair (0, 0). Then the step counters advance.
void Trainer::shadow_step() {
  const Device device = device_of(*model_);
  if (options_.amp_ == DType::f16) {
    Tensor flag = zeros({1}, TensorOptions(DType::f32).device(device));
    group_->allreduce(flag, AllreduceOptions().op(ReduceOp::max))->wait();
  }
  if (log_step(global_step_)) {
    Tensor pair = zeros({2}, TensorOptions(DType::f64).device(device));
    group_->allreduce(pair)->wait();
  }
  scheduler_.step();
  ++global_step_;
}

std::vector<optim::RngState> Trainer::gather_rng_states() {
  const Generator& g = default_generator();
  if (world_ == 1) return {optim::RngState::of(g)};
  Tensor mine = from_vector<int64_t>({static_cast<int64_t>(g.seed()), static_cast<int64_t>(g.offset())}, {2})
                    .to(device_of(*model_));
  Tensor all = empty({2 * int64_t(world_)}, TensorOptions(DType::i64).device(device_of(*model_)));
  group_->allgather(all, mine)->wait();
  std::vector<int64_t> v = all.to(Device::cpu()).to_vector<int64_t>();
  std::vector<optim::RngState> out(world_);
  for (int r = 0; r < world_; ++r)
    out[r] = {static_cast<uint64_t>(v[2 * r]), static_cast<uint64_t>(v[2 * r + 1])};
  return out;
}

void Trainer::sync_buffers() {
  if (ddp_) ddp_->prepare_forward();
  if (sharded_reducer_ && options_.ddp_.broadcast_buffers_) sharded_reducer_->broadcast_buffers();
  if (fsdp_) fsdp_->prepare_forward();  // also gathers the root unit, which the model's own forward reads
}

void Trainer::register_comm_hook(CommHook hook) {
  KILN_CHECK(!sharded_reducer_ && !fsdp_, "Trainer::register_comm_hook: sharding ", sharding_name(options_.sharding_),
             " reduce-scatters gradients without DDP's buckets, so a comm hook would never run; use sharding "
             "none or zero1");
  if (ddp_) ddp_->register_comm_hook(std::move(hook));
}

void Trainer::save_checkpoint(const std::string& path, const std::string& data_cursor) {
  KILN_CHECK(!path.empty(), "Trainer::save_checkpoint: the path is empty");
  if (ddp_) ddp_->check_collective_order();  // never write weights a mismatched reduction produced
  optim::TrainingProgress progress;
  progress.global_step = global_step_;
  progress.scheduler_step = scheduler_.last_step();
  progress.rng = gather_rng_states();  // collective: every rank's default generator
  progress.data_cursor = data_cursor;
  for (auto& [name, t] : scaler_.state_dict()) progress.extra.emplace_back(kScalerPrefix + name, t);
  // FSDP: the parameters are sharded, so the model's state is gathered one unit at a time (rank 0 keeps it).
  // Master weights (Note [Master weights]): the f32 values, not the 16-bit parameters (collective).
  const optim::NamedTensors model_state = fsdp_     ? fsdp_->full_state_dict()
                                          : sharded_ ? with_master_weights(*sharded_, model_->state_dict())
                                                     : model_->state_dict();
  if (sharded_ && options_.sharded_checkpoints_) {
    save_sharded_checkpoint(path, model_state, *sharded_, progress, *group_);  // collective
    return;
  }
  if (sharded_) sharded_->consolidate_state_dict();  // collective: rank 0 then writes the full state
  std::string failure;
  if (rank_ == 0) {
    try {
      fs::path parent = fs::path(path).parent_path();
      if (!parent.empty()) fs::create_directories(parent);
      optim::save_checkpoint(path, model_state, *optimizer_, progress);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  // Doubles as the barrier: nobody returns before the file is complete, and a failed write on
  // rank 0 fails every rank instead of leaving them waiting.
  bool failed = !failure.empty();
  if (world_ > 1) failed = any_rank(failed);
  if (!failure.empty()) throw IOError(failure);
  KILN_CHECK_IO(!failed, "Trainer::save_checkpoint: rank 0 failed to write ", path);
}

std::optional<std::string> Trainer::load_checkpoint(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::error_code ec;
  KILN_CHECK(fs::is_regular_file(path, ec), "Trainer::load_checkpoint: no checkpoint file at ", path);
  reset_graph();  // the loaded optimizer state lives in new tensors: capture again
  // FSDP: the full parameters are gathered to load into, then each rank keeps its chunks.
  if (fsdp_) fsdp_->gather_full_params();  // collective
  optim::TrainingProgress progress;
  try {
    optim::NamedTensors target = model_->state_dict();
    // Master weights: the file's f32 parameters load into stand-ins, then into the shards.
    const std::vector<Tensor> masters = sharded_ ? master_stand_ins(*sharded_, target) : std::vector<Tensor>();
    progress = optim::load_checkpoint(path, target, *optimizer_);
    if (!masters.empty()) sharded_->load_master_parameters(masters);
    // Note [Sharded checkpoint files]: the index carried no optimizer state; the shards hold it.
    if (auto full = read_optimizer_shards(path, progress)) optimizer_->load_state_dict(*full);
  } catch (...) {
    if (fsdp_) fsdp_->reshard_full_params(/*writeback=*/false);
    throw;
  }
  if (fsdp_) fsdp_->reshard_full_params(/*writeback=*/true);
  optim::NamedTensors scaler_state;
  for (auto& [name, t] : progress.extra)
    if (name.rfind(kScalerPrefix, 0) == 0) scaler_state.emplace_back(name.substr(std::string(kScalerPrefix).size()), t);
  if (!scaler_state.empty()) scaler_.load_state_dict(scaler_state);  // ignored when disabled
  global_step_ = progress.global_step;
  scheduler_.set_step(progress.scheduler_step);
  if (!progress.rng.empty()) progress.rng[size_t(rank_) % progress.rng.size()].restore(default_generator());
  return progress.data_cursor;
}

std::string Trainer::checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / ("step_" + std::to_string(step) + ".safetensors")).string();
}

std::string Trainer::latest_checkpoint(const std::string& dir) {
  auto all = list_checkpoints(dir);
  return all.empty() ? std::string() : all.back().second.string();
}

void Trainer::checkpoint_if_due() {
  if (options_.checkpoint_every_ == 0 || global_step_ % options_.checkpoint_every_ != 0) return;
  std::string cursor = options_.checkpoint_cursor_ ? options_.checkpoint_cursor_() : std::string();
  save_checkpoint(checkpoint_path(options_.checkpoint_dir_, global_step_), cursor);
  prune_checkpoints();
}

void Trainer::prune_checkpoints() {
  if (rank_ != 0 || options_.keep_last_checkpoints_ == 0 || options_.checkpoint_dir_.empty()) return;
  auto all = list_checkpoints(options_.checkpoint_dir_);
  const size_t keep = size_t(options_.keep_last_checkpoints_);
  for (size_t i = 0; i + keep < all.size(); ++i) {
    std::error_code ec;
    fs::remove(all[i].second, ec);  // a checkpoint that cannot be removed is only wasted disk
    const std::string shards = all[i].second.filename().string() + ".shard-";  // Note [Sharded checkpoint files]
    for (const auto& entry : fs::directory_iterator(options_.checkpoint_dir_, ec))
      if (entry.path().filename().string().rfind(shards, 0) == 0) fs::remove(entry.path(), ec);
  }
}

}  // namespace kiln::dist
