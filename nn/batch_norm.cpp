// BatchNorm2d: parameters, running-stat buffers, the num_batches_tracked counter and the
// train/eval choice of statistics around kiln::batch_norm.
#include <kiln/autograd/grad_mode.h>
#include <kiln/autograd/ops/batch_norm.h>
#include <kiln/autograd/ops/elementwise.h>
#include <kiln/core/factory.h>
#include <kiln/nn/init.h>
#include <kiln/nn/normalization.h>

namespace kiln::nn {

BatchNorm2d::BatchNorm2d(const BatchNormOptions& opts) : options(opts) {
  const int64_t c = options.num_features_;
  KILN_CHECK_VALUE(c > 0, "BatchNorm2d: num_features must be positive, got ", c);
  KILN_CHECK_VALUE(options.momentum_ >= 0 && options.momentum_ <= 1, "BatchNorm2d: momentum ", options.momentum_,
                   " is outside [0, 1]");
  if (options.affine_) {
    weight = register_parameter("weight", empty({c}));
    bias = register_parameter("bias", empty({c}));
  }
  if (options.track_running_stats_) {
    running_mean = register_buffer("running_mean", empty({c}));
    running_var = register_buffer("running_var", empty({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::i64));
  }
  reset_parameters();
}

void BatchNorm2d::reset_running_stats() {
  if (!options.track_running_stats_) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void BatchNorm2d::reset_parameters() {
  reset_running_stats();
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  check_defined(x, "BatchNorm2d::forward");
  const int64_t c = options.num_features_;
  KILN_CHECK_VALUE(x.dim() == 4 && x.size(1) == c, "BatchNorm2d(num_features=", c, "): expected input of shape (N, ", c,
                   ", H, W), got ", x.shape());
  bool use_batch_stats = is_training() || !options.track_running_stats_;
  // As torch's SyncBatchNorm: only training syncs (eval without running stats uses the local batch).
  const bool synced = is_training() && cross_process_stats && cross_process_stats->size() > 1;
  if (is_training() && options.track_running_stats_) {
    // Synced: one value here is fine when the other processes have more (the global count).
    KILN_CHECK_VALUE(synced || x.numel() / c > 1, "BatchNorm2d(num_features=", c,
                     "): training needs more than one value per channel, got input ", x.shape());
    NoGradGuard no_grad;
    // On the tensor's device: no host round trip on the training path.
    num_batches_tracked.copy_(kiln::add(num_batches_tracked, ones_like(num_batches_tracked)));
  }
  if (synced) {
    return sync_batch_norm(x, *cross_process_stats, running_mean, running_var, weight, bias, options.momentum_,
                           options.eps_);
  }
  return kiln::batch_norm(x, running_mean, running_var, weight, bias, use_batch_stats, options.momentum_,
                          options.eps_);
}

std::string BatchNorm2d::extra_repr() const {
  return detail::str_cat(options.num_features_, ", eps=", options.eps_, ", momentum=", options.momentum_,
                         ", affine=", options.affine_ ? "true" : "false",
                         ", track_running_stats=", options.track_running_stats_ ? "true" : "false");
}

}  // namespace kiln::nn
