// bench_gpt's Kiln side: one GPT training step (forward and loss under autocast, backward, AdamW
// step, zero_grad) timed on the CPU or a CUDA device, either on the plain model or through
// DistributedDataParallel on a one-rank process group (the DDP overhead of issue #6).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/device.h>
#include <kiln/core/dtype.h>
#include <kiln/models/gpt.h>
#include <kiln/parallel/process_group.h>

namespace kiln::apps {

class StepProfiler;

struct BenchStepOptions {
  models::GPTConfig config;
  int64_t batch = 8, seq = 128;
  Device device = Device::cpu();
  DType amp = DType::f32;  // f32: no autocast; bf16: autocast to bf16, f32 master weights (as train_gpt)
  int warmup = 2, steps = 10;
  models::GPTRecompute recompute = models::GPTRecompute::none;  // GPT::set_recompute
  models::GPTFusedHead fused_head = models::GPTFusedHead::automatic;  // GPT::set_fused_head
  // Non-null: the step runs through DistributedDataParallel over this group (prepare_forward,
  // forward, backward, finish_gradient_synchronization, step), as dist::Trainer drives it.
  std::shared_ptr<dist::ProcessGroup> ddp_group;
  bool gradient_as_bucket_view = false;  // DDPOptions::gradient_as_bucket_view
  // --cuda-graph: the step runs through a dist::Trainer with TrainerOptions::cuda_graph (warm-up
  // warmup - 1 eager steps, the capture in the last warm-up step), so every timed step is a replay.
  bool cuda_graph = false;
  // --profile: begin_step/end_step around every step (warm-up included, counted from 0).
  StepProfiler* profiler = nullptr;
  // --profile-overhead: every timed step runs inside its own profiling session (the recording
  // costs are timed, collecting the trace after the step is not); StepTiming::events counts them.
  bool profile_each_step = false;
};

struct StepTiming {
  double seconds = 0;                // median of the timed steps
  std::vector<double> step_seconds;  // every timed step, in the order they ran
  int64_t peak_bytes = 0;  // CUDA: the caching allocator's peak allocated bytes over the timed steps
  int64_t events_per_step = 0;  // profile_each_step: trace events of the last timed step
  std::string error;       // set when the step could not run ("out of memory", or the error's message)
  bool oom = false;
  bool ok() const { return error.empty(); }
};

// Builds the model (GPT's default seed) and an AdamW (lr 3e-4, weight decay 0.1; the fused
// multi-tensor kernel on CUDA) on `device`, runs `warmup` untimed steps, then times `steps`
// steps, each bracketed by a device synchronize on CUDA. Errors (an out-of-memory above all)
// come back in StepTiming instead of being thrown; on CUDA the allocator's cache is emptied
// before returning, so a PyTorch process started next finds the memory free.
StepTiming time_kiln_step(const BenchStepOptions& options);

// The same for several variants of one step (e.g. without and with DDP; same device, batch and
// step counts), each with its own model, all alive at once and stepped in turn: step i of every
// variant before step i + 1 of any, starting with a different variant each time, so a change in
// the machine's load touches every variant alike (and step_seconds[i] of two variants ran side by
// side). The peak memory is that of all of them together. When one fails, every variant reports
// its error.
std::vector<StepTiming> time_kiln_steps(const std::vector<BenchStepOptions>& variants);

// A process group of one rank for `device`: Gloo on the CPU, NCCL on CUDA, rendezvousing through
// a FileStore in a fresh temporary directory (removed when the group is destroyed).
std::shared_ptr<dist::ProcessGroup> make_single_rank_group(Device device);

}  // namespace kiln::apps
