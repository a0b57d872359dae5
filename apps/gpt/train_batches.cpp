// TrainBatches (see train_batches.h): train_gpt's micro-batches, eager or staged for the CUDA graph.
#include "train_batches.h"

#include <kiln/core/error.h>

namespace kiln::apps {

TrainBatches::TrainBatches(data::TokenLoader& loader, models::GPT& model, Device device, bool cuda_graph)
    : loader_(loader), model_(model), device_(device), cuda_graph_(cuda_graph) {}

// The loader's next batch for the step printed as `step`: a shard that changed under the run (an
// IOError naming the file and offset, Note [Shards changed under a run]) names the step too.
data::TokenBatch TrainBatches::next_batch(int64_t step) {
  try {
    return loader_.next();
  } catch (const IOError& e) {
    throw IOError(detail::str_cat(e.what(), " (train_gpt step ", step, ")"));
  }
}

std::function<Tensor(int)> TrainBatches::micro_loss(int64_t step, int accum) {
  if (!cuda_graph_) {
    return [this, step](int) {
      data::TokenBatch b = next_batch(step);
      return model_.loss(b.x.to(device_, /*non_blocking=*/true), b.y.to(device_, /*non_blocking=*/true));
    };
  }
  // Note [Whole-step CUDA graph]: the captured step reads the same buffers every step.
  for (int i = 0; i < accum; ++i) {
    data::TokenBatch b = next_batch(step);
    if (static_x_.size() < size_t(accum)) {
      static_x_.push_back(empty(b.x.shape(), b.x.dtype(), device_));
      static_y_.push_back(empty(b.y.shape(), b.y.dtype(), device_));
    }
    static_x_[i].copy_(b.x, /*non_blocking=*/true);
    static_y_[i].copy_(b.y, /*non_blocking=*/true);
  }
  return [this](int i) { return model_.loss(static_x_[i], static_y_[i]); };
}

}  // namespace kiln::apps
