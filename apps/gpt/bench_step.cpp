// bench_gpt's timed Kiln step (see bench_step.h): the same step with and without DDP, with the
// device synchronized around every timed step on CUDA and the allocator's peak read after them.
#include "bench_step.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <kiln/kiln.h>

#include "common/profiling.h"

namespace kiln::apps {

namespace {

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const cuda::OutOfMemoryError*>(&e) != nullptr) return true;
  const std::string what = e.what();
  return what.find("out of memory") != std::string::npos || what.find("CUBLAS_STATUS_ALLOC_FAILED") != std::string::npos;
}

void synchronize(Device device) {
  if constexpr (cuda::kBuilt)
    if (device.is_cuda()) cuda::synchronize(device.index);
}

// One variant's model, optimizer, optional DDP wrapper and batch.
class Runner {
 public:
  explicit Runner(const BenchStepOptions& o)
      : o_(o), model_(std::make_shared<models::GPT>(models::GPTOptions(o.config).recompute(o.recompute).fused_head(o.fused_head))) {
    model_->to(o.device);
    model_->train();
    opt_ = std::make_shared<optim::AdamW>(model_->parameters(), optim::AdamWOptions(3e-4).weight_decay(0.1));
    if (o.cuda_graph) {
      KILN_CHECK(!o.ddp_group, "bench_gpt: --cuda-graph runs without DDP");
      KILN_CHECK(o.warmup >= 2, "bench_gpt: --cuda-graph needs --warmup >= 2 (eager steps, then the capture)");
      trainer_ = std::make_unique<dist::Trainer>(
          model_, opt_, nullptr,
          dist::TrainerOptions().amp(o.amp).log_every(0).cuda_graph(true).cuda_graph_warmup(o.warmup - 1));
    }
    if (o.ddp_group)
      ddp_ = std::make_unique<dist::DistributedDataParallel>(
          model_, o.ddp_group, dist::DDPOptions().gradient_as_bucket_view(o.gradient_as_bucket_view));
    Generator g(0);
    idx_ = randint(0, o.config.vocab_size, {o.batch, o.seq}, g).to(o.device);
    targets_ = randint(0, o.config.vocab_size, {o.batch, o.seq}, g).to(o.device);
  }

  void step() {
    if (o_.profiler) o_.profiler->begin_step(steps_);
    {
      profiler::Range range("step", profiler::Category::step, {"step", steps_});
      if (trainer_) {  // --cuda-graph: the same work, through the Trainer's captured step
        trainer_->step([&](int) { return model_->loss(idx_, targets_); });
        if (o_.profiler) o_.profiler->end_step(steps_);
        ++steps_;
        return;
      }
      if (ddp_) ddp_->prepare_forward();
      Tensor loss;
      {
        const bool autocast = o_.amp != DType::f32;
        AutocastGuard guard(autocast ? o_.amp : DType::bf16, autocast);
        loss = model_->loss(idx_, targets_);
      }
      loss.backward();
      if (ddp_) ddp_->finish_gradient_synchronization();
      opt_->step();
      opt_->zero_grad(/*set_to_none=*/true);
    }
    if (o_.profiler) o_.profiler->end_step(steps_);
    ++steps_;
  }

  // Seconds of one step, the device synchronized before and after.
  double timed_step() {
    synchronize(o_.device);
    if (o_.profile_each_step) profiler::start();
    const auto t0 = std::chrono::steady_clock::now();
    step();
    synchronize(o_.device);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o_.profile_each_step) events_ = int64_t(profiler::stop().events.size());
    return seconds;
  }
  int64_t events() const { return events_; }

 private:
  BenchStepOptions o_;
  std::shared_ptr<models::GPT> model_;
  std::shared_ptr<optim::AdamW> opt_;
  std::unique_ptr<dist::Trainer> trainer_;              // --cuda-graph
  std::unique_ptr<dist::DistributedDataParallel> ddp_;  // destroyed before the model and optimizer
  Tensor idx_, targets_;
  int64_t steps_ = 0, events_ = 0;
};

// The timed part, separate so that every tensor and model is gone when it returns (also after an
// exception), before the cache is emptied.
std::vector<StepTiming> run(const std::vector<BenchStepOptions>& variants) {
  const BenchStepOptions& o = variants.front();
  std::vector<std::unique_ptr<Runner>> runners;
  for (const BenchStepOptions& v : variants) runners.push_back(std::make_unique<Runner>(v));
  for (int i = 0; i < o.warmup; ++i)
    for (auto& r : runners) r->step();
  synchronize(o.device);
  reset_peak_memory_stats(o.device);  // CPU or CUDA: the timed steps' own peak
  const size_t n = runners.size();
  std::vector<std::vector<double>> times(n);
  for (int i = 0; i < o.steps; ++i)
    for (size_t k = 0; k < n; ++k) {
      const size_t v = (size_t(i) + k) % n;
      times[v].push_back(runners[v]->timed_step());
    }
  // A replayed CUDA graph allocates nothing: its step's tensors live in the graph's private pool,
  // blocks that count as reserved, not allocated, from the capture on (the first H200 run reported
  // gpt-1.3b's graphed peak as 14.7 GiB, the weights and AdamW alone). Under --cuda-graph the peak is
  // therefore the reserved bytes after the replays (the Trainer empties the cache before the capture,
  // so they are the live tensors, the pool and what later steps cached).
  const MemoryStats stats = memory_stats(o.device);
  const int64_t peak = o.cuda_graph ? std::max(stats.peak_allocated_bytes, stats.reserved_bytes)
                                    : stats.peak_allocated_bytes;
  std::vector<StepTiming> out(n);
  for (size_t v = 0; v < n; ++v) {
    out[v].step_seconds = times[v];
    std::sort(times[v].begin(), times[v].end());
    out[v].seconds = times[v][times[v].size() / 2];
    out[v].peak_bytes = peak;
    out[v].events_per_step = runners[v]->events();
  }
  return out;
}

// A directory that is removed (with what is left in it) when the last owner lets go.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kiln_bench_gpt_XXXXXX").string();
    KILN_CHECK(::mkdtemp(pattern.data()) != nullptr, "make_single_rank_group: cannot create a temporary directory like ", pattern);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);  // a leftover temporary directory is only clutter
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace

std::vector<StepTiming> time_kiln_steps(const std::vector<BenchStepOptions>& variants) {
  KILN_CHECK(!variants.empty(), "time_kiln_steps: no step variant to time");
  const BenchStepOptions& o = variants.front();
  for (const BenchStepOptions& v : variants)
    KILN_CHECK(v.device == o.device && v.steps == o.steps && v.warmup == o.warmup,
               "time_kiln_steps: the step variants must share the device and step counts");
  KILN_CHECK(o.steps >= 1 && o.warmup >= 0, "time_kiln_steps: steps must be >= 1 and warmup >= 0, got ", o.steps, " and ",
             o.warmup);
  std::vector<StepTiming> out;
  try {
    out = run(variants);
  } catch (const std::exception& e) {
    StepTiming failed;
    failed.oom = is_out_of_memory(e);
    failed.error = failed.oom ? "out of memory" : e.what();
    out.assign(variants.size(), failed);
  }
  if (o.device.is_cuda()) {
    try {
      synchronize(o.device);
      cuda::empty_cache();
    } catch (const std::exception& e) {
      for (StepTiming& t : out)
        if (t.ok()) t.error = e.what();  // the device is unusable: say so in these rows
    }
  }
  return out;
}

StepTiming time_kiln_step(const BenchStepOptions& options) { return time_kiln_steps({options}).front(); }

std::shared_ptr<dist::ProcessGroup> make_single_rank_group(Device device) {
  // The group (and its store) go before the directory: members are destroyed in reverse order.
  struct Owner {
    TempDir dir;
    std::shared_ptr<dist::ProcessGroup> group;
  };
  auto owner = std::make_shared<Owner>();
  auto store = dist::make_file_store(owner->dir.path.string(), 1);
  if constexpr (cuda::kBuilt) {
    if (device.is_cuda()) {
      cuda::set_device(device.index);
      owner->group = dist::make_nccl_process_group(store, 0, 1, dist::NcclOptions().device(device.index));
    }
  }
  KILN_CHECK(!device.is_cuda() || owner->group != nullptr, "make_single_rank_group: a process group on ", device,
             " needs Kiln built with CUDA");
  if (!owner->group) owner->group = dist::make_gloo_process_group(store, 0, 1);
  return std::shared_ptr<dist::ProcessGroup>(owner, owner->group.get());
}

}  // namespace kiln::apps
