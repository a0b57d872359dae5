// validation_loss: train_gpt's evaluation, the mean loss over the first batches of the validation
// shards, averaged across ranks.
#pragma once

#include <cstdint>
#include <memory>

#include <kiln/kiln.h>

namespace kiln::apps {

// Mean loss over `batches` batches of this rank's `loader` (reset to its start first), under
// autocast to `amp` (f32: off), averaged across `group`'s ranks (collective; null: alone). The
// model is in eval mode meanwhile and back in train mode after.
double validation_loss(models::GPT& model, data::TokenLoader& loader, int64_t batches, DType amp, Device device,
                       const std::shared_ptr<dist::ProcessGroup>& group);

}  // namespace kiln::apps
