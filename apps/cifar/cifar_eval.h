// Test-set accuracy for train_cifar under data parallelism: every rank evaluates a contiguous
// share of the test set with the same weights and buffers, and the counts are summed across ranks.
#pragma once

#include <cstdint>
#include <memory>

#include <kiln/core/device.h>
#include <kiln/core/dtype.h>
#include <kiln/data/cifar10.h>
#include <kiln/models/cifar_cnn.h>
#include <kiln/parallel/process_group.h>

namespace kiln::apps {

struct EvalCounts {
  int64_t correct = 0;
  int64_t total = 0;
  double accuracy() const { return total > 0 ? double(correct) / double(total) : 0.0; }
};

// Note [Distributed evaluation]
// Rank r of W takes test rows [r * N / W, (r + 1) * N / W) (no padding, so no image counts
// twice), runs the model in eval mode without gradients (autocast to `amp` when it is bf16 or f16)
// on `device` and counts argmax == label; the (correct, total) pairs are summed with one all-reduce. The
// caller must first make the BatchNorm buffers equal on every rank (DDP's prepare_forward
// broadcasts rank 0's), so the result equals rank 0 evaluating the whole set alone. The model is
// left in training mode. `group` may be null (one process).
EvalCounts evaluate(models::CifarCnn& model, const data::Cifar10Dataset& test, dist::ProcessGroup* group,
                    int64_t batch_size, DType amp, Device device);

}  // namespace kiln::apps
