// Fused softmax cross-entropy over rows of logits, the raw kernels behind kiln::cross_entropy.
// The forward keeps only per-row results (the loss and the logsumexp); the backward rebuilds the
// softmax from the logits and the saved logsumexp. 16-bit logits are computed in float without an
// f32 copy of the (N, C) logits or of the probabilities.
#pragma once

#include <cstdint>

#include <kiln/core/tensor.h>

namespace kiln::ops {

struct CrossEntropyResult {
  // (N,) f32 (f64 for f64 logits): -(1 - ls) logp[i, t_i] - ls / C sum_c logp[i, c], where
  // logp = log_softmax(logits[i]) and ls = label_smoothing; 0 on ignored rows.
  Tensor loss;
  Tensor lse;    // (N,) logsumexp of each row (0 on ignored rows), loss's dtype
  Tensor count;  // 0-dim i64 on the logits' device: rows whose target is not ignore_index
};

// logits (N, C) floating with C >= 1; targets (N,) i64 or i32 class ids in [0, C), or
// ignore_index. A target outside both is an error naming its value and row. On CUDA nothing is
// read back: the count stays on the device (the mean divides by it there) and the target check is
// a device record reported through Note [Deferred device checks] (core/cuda/runtime/deferred_check.h).
CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                                         double label_smoothing = 0.0);

// The gradient of the forward's loss[i] with respect to logits (N, C), times grad_loss[i] * scale,
// in logits' dtype: (softmax(logits[i]) - (1 - ls) onehot(t_i) - ls / C) * grad_loss[i] * scale,
// 0 on ignored rows. grad_loss is (N,), or one element used for every row (sum / mean
// reductions); lse is the forward's. `count` (the forward's, for the mean reduction), when given,
// multiplies scale by 1 / count (in double, read on the logits' device). `columns` > C gives the
// gradient with respect to logits padded to that many columns, (N, columns) with zeros after column
// C: logits is then typically the first C columns of the padded ones, which CUDA reads in place.
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t ignore_index = -100, double label_smoothing = 0.0, double scale = 1.0,
                              const Tensor& count = {}, int64_t columns = 0);

// Fails naming the first target (a CPU tensor, i64 or i32) that is neither in [0, classes) nor
// ignore_index.
void check_targets(const Tensor& targets, int64_t classes, int64_t ignore_index);

// The error for target `value` at `row`; `late`: a CUDA check read after the op returned.
[[noreturn]] void throw_bad_target(int64_t value, int64_t row, int64_t classes, int64_t ignore_index,
                                   bool late = false);

}  // namespace kiln::ops
