// The micro-batches of train_gpt's steps: each drawn from the training loader (a shard that changed
// under the run names the step) and sent to the device without waiting; under --cuda-graph copied
// into static buffers first, since the captured step reads the same ones every step.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <kiln/core/device.h>
#include <kiln/core/tensor.h>
#include <kiln/data/token_loader.h>
#include <kiln/models/gpt.h>

namespace kiln::apps {

// Holds references: `loader` and `model` outlive it.
class TrainBatches {
 public:
  TrainBatches(data::TokenLoader& loader, models::GPT& model, Device device, bool cuda_graph);

  // Trainer::step's micro-step loss for the step printed as `step` (1-based), whose `accum`
  // micro-batches are drawn in order: one per call eagerly, all of them now under --cuda-graph
  // (Note [Whole-step CUDA graph]).
  std::function<Tensor(int micro_step)> micro_loss(int64_t step, int accum);

 private:
  data::TokenBatch next_batch(int64_t step);

  data::TokenLoader& loader_;
  models::GPT& model_;
  Device device_;
  bool cuda_graph_;
  std::vector<Tensor> static_x_, static_y_;  // --cuda-graph: one (B, T) pair per micro-step
};

}  // namespace kiln::apps
