// LayerNorm (over trailing dims) and BatchNorm2d (per channel of NCHW, with running statistics
// as buffers running_mean, running_var and the i64 counter num_batches_tracked, as torch).
#pragma once

#include <cstdint>
#include <memory>

#include <kiln/core/arg.h>
#include <kiln/core/shape.h>
#include <kiln/nn/module.h>

namespace kiln::nn {

/// Options of LayerNorm (torch.nn.LayerNorm's arguments).
struct LayerNormOptions {
  Shape normalized_shape_;
  KILN_ARG(double, eps) = 1e-5;
  KILN_ARG(bool, elementwise_affine) = true;
  KILN_ARG(bool, bias) = true;

  explicit LayerNormOptions(Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
};

/// Layer normalization over the trailing normalized_shape dimensions (torch.nn.LayerNorm).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(const LayerNormOptions& options);
  explicit LayerNorm(int64_t features) : LayerNorm(LayerNormOptions({features})) {}

  /// x (..., *normalized_shape) -> same shape.
  Tensor forward(const Tensor& x);
  void reset_parameters();

  std::string name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

  LayerNormOptions options;
  Tensor weight;  ///< normalized_shape, ones (undefined without elementwise_affine)
  Tensor bias;    ///< normalized_shape, zeros (undefined without elementwise_affine or bias)
};

/// Options of BatchNorm2d and SyncBatchNorm (torch.nn.BatchNorm2d's arguments).
struct BatchNormOptions {
  int64_t num_features_;
  KILN_ARG(double, eps) = 1e-5;
  KILN_ARG(double, momentum) = 0.1;
  KILN_ARG(bool, affine) = true;
  KILN_ARG(bool, track_running_stats) = true;

  explicit BatchNormOptions(int64_t num_features) : num_features_(num_features) {}
};

/// Sums a tensor over the processes of a group, differentiably: the backward sums the gradient over
/// the same processes. nn knows no processes; parallel/sync_batch_norm.h implements it (over a
/// dist::ProcessGroup), and a BatchNorm2d given one takes its batch statistics across them.
class CrossProcessSum {
 public:
  virtual ~CrossProcessSum() = default;
  /// Collective: every process passes a tensor of the same shape and dtype.
  virtual Tensor sum(const Tensor& t) = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
};

/// Training: normalizes with the batch statistics and updates the running ones (momentum,
/// unbiased variance). Eval: normalizes with the running statistics (batch statistics when
/// track_running_stats is off). With `cross_process_stats` set (SyncBatchNorm), batch statistics
/// are those of the batches of every process together (Note [SyncBatchNorm] in nn/sync_batch_norm.cpp, in the source tree, in the
/// source tree).
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(const BatchNormOptions& options);
  explicit BatchNorm2d(int64_t num_features) : BatchNorm2d(BatchNormOptions(num_features)) {}

  /// x (N, num_features, H, W) -> same shape.
  Tensor forward(const Tensor& x);
  void reset_running_stats();
  void reset_parameters();

  std::string name() const override { return "BatchNorm2d"; }
  std::string extra_repr() const override;

  BatchNormOptions options;
  Tensor weight, bias;                 ///< (C): ones, zeros (undefined without affine)
  Tensor running_mean, running_var;    ///< (C): zeros, ones (undefined without track_running_stats)
  Tensor num_batches_tracked;          ///< 0-dim i64
  std::shared_ptr<CrossProcessSum> cross_process_stats;  ///< null: this process's batch only
};

/// Batch norm in training mode over the batches of every process of `sum` together (the global
/// batch statistics, taken from per-process counts, means and centered sums of squares), updating
/// the running statistics when defined. x (N, C, H, W); N may differ across processes.
Tensor sync_batch_norm(const Tensor& x, CrossProcessSum& sum, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, double momentum, double eps);

}  // namespace kiln::nn
