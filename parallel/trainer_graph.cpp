// The Trainer's whole-step CUDA graph (TrainerOptions::cuda_graph): warm-up on a side stream, one
// capture of a step's device work, replays after it.
#include <kiln/parallel/trainer_graph.h>

#include <exception>

#include <kiln/cuda.h>

namespace kiln::dist {

// Note [Whole-step CUDA graph]
// A training step with static shapes queues the same kernels with the same arguments every step;
// only the inputs' values, the learning rate and the step counts change. So the Trainer runs the
// first cuda_graph_warmup steps eagerly (they create the optimizer's moments and device step counts,
// move the GradScaler to the device, build cuBLAS/cuDNN plans and fill the allocator's cache), then
// captures the next step's device work (run_device_step: every micro-step's forward and backward,
// unscale and the overflow flag, clipping, the optimizer, the scale update, zero_grad) into a
// cuda::Graph and replays it, for that step and every later one. What stays on the host every step:
// the schedule (its lr reaches the captured optimizer kernels through refresh_device_lr(), Note
// [Learning rate on the device]), the step counter, the log-step reads (after the replay, of the
// graph's outputs, then the captured ops' device checks: an index or target out of range in the
// step just replayed, Note [Deferred device checks]; a bad index in a step that is not a log step
// goes unreported, as the next replay rewrites its record) and checkpoints. Step counts and the
// GradScaler's state already live on the device (Note [Device step counts], [GradScaler on CUDA]).
// Streams: a capture cannot use the legacy default stream, so warm-up, capture and replays run on a
// side stream of the model's device (warm-up there too, so the blocks the capture reuses are that
// stream's). It waits for the caller's current stream when a step starts (the caller copied the
// step's batch into the static inputs there), and the caller's stream waits for it when the step
// ends (the next copy into the inputs must not overtake the graph still reading them).
// Memory: the capture allocates from the graph's private pool (Note [Graph pools]), which stays
// reserved while the graph lives; the step's transient memory is reused by every replay, not freed.
// The cache is emptied once before the capture, so the warm-up's cached blocks do not double it.
// Refused, with a message, at construction: a model not on CUDA, more than one process (the DDP
// reducer launches its all-reduces from backward hooks on the host; not captured yet), sharding;
// join() and sync_loss inside it are refused as without graphs. load_checkpoint() drops the graph
// (the optimizer's loaded buffers are new tensors): the next steps warm up and capture again.

Trainer::~Trainer() = default;

bool Trainer::graph_captured() const { return graph_ && graph_->graph.captured(); }

int64_t Trainer::graph_replays() const { return graph_ ? graph_->replays : 0; }

void Trainer::check_graph_supported() const {
  const Device device = device_of(*model_);
  KILN_CHECK(device.is_cuda(), "TrainerOptions::cuda_graph captures the training step as a CUDA graph, so the model "
             "must be on a CUDA device; its parameters are on ", device, cuda::kBuilt ? "" : " (and Kiln was built "
             "without CUDA)", ". Move the model first (model->to(Device::cuda())) or leave cuda_graph off");
  KILN_CHECK(world_ == 1 && !ddp_ && !sharded_ && !fsdp_ && !sharded_reducer_, "TrainerOptions::cuda_graph runs "
             "single-process without sharding for now (world size ", world_, ", sharding ",
             sharding_name(group_ ? options_.sharding_ : Sharding::none), "): the gradient all-reduces are "
             "launched from backward hooks on the host and are not captured. Leave cuda_graph off to train data "
             "parallel");
}

void Trainer::check_graph_faults() {
  if (graph_ && graph_->graph.captured()) cuda::check_captured_fault_records(graph_->faults);
}

void Trainer::reset_graph() {
  if (!graph_) return;
  graph_->graph.reset();
  graph_->outputs = {};
  graph_->faults.clear();
  graph_->eager_steps = 0;
}

Trainer::DeviceStep Trainer::graph_device_step(const std::function<Tensor(int micro_step)>& micro_loss) {
  KILN_CHECK(!joining_, "Trainer::join: uneven inputs are not supported with TrainerOptions::cuda_graph");
  const Device device = device_of(*model_);
  if (!graph_) {
    graph_ = std::make_unique<GraphState>();
    graph_->stream = cuda::Stream::create_unshared(device.index);  // no other user may queue on it
  }
  GraphState& g = *graph_;
  const cuda::Stream caller = cuda::current_stream(device.index);
  cuda::Event inputs_ready;
  inputs_ready.record(caller);
  inputs_ready.wait(g.stream);
  DeviceStep out;
  {
    cuda::StreamGuard on_side(g.stream);
    if (g.eager_steps < options_.cuda_graph_warmup_) {
      out = run_device_step(micro_loss);
      ++g.eager_steps;
    } else {
      optimizer_->refresh_device_lr();  // before the capture too: it creates the device copies
      if (!g.graph.captured()) {
        // The warm-up's freed activations sit in the side stream's ordinary cache, where nothing
        // would reuse them once the graph replays from its own pool: give them back first, or a
        // large model would hold its step's transient memory twice.
        cuda::empty_cache();
        (void)cuda::take_captured_fault_records();  // none should be left; never another capture's
        g.graph.capture_begin(g.stream);
        try {
          g.outputs = run_device_step(micro_loss);
          g.graph.capture_end();  // the captured work has not run: the replay below runs it
        } catch (...) {
          // Nothing captured ran, so what it allocated holds garbage: drop the graph, its records
          // and the gradients it left (a later capture would add into them), and warm up again.
          g.outputs = {};
          g.graph.reset();
          (void)cuda::take_captured_fault_records();
          optimizer_->zero_grad(/*set_to_none=*/true);
          g.eager_steps = 0;
          throw;
        }
        g.faults = cuda::take_captured_fault_records();
      }
      g.graph.replay();
      ++g.replays;
      out = g.outputs;
    }
  }
  cuda::Event step_done;
  step_done.record(g.stream);
  step_done.wait(caller);
  return out;
}

}  // namespace kiln::dist
