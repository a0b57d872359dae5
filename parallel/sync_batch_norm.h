// SyncBatchNorm (torch.nn.SyncBatchNorm): BatchNorm2d whose training-mode batch statistics are
// those of every rank's batch together, for small per-rank batches. It needs a ProcessGroup, so it
// lives in parallel/ while keeping torch's name nn::SyncBatchNorm; the math is nn's
// (sync_batch_norm, Note [SyncBatchNorm] in nn/sync_batch_norm.cpp, in the source tree).
#pragma once

#include <memory>

#include <kiln/nn/normalization.h>
#include <kiln/parallel/process_group.h>

namespace kiln::dist {

/// Sums `t` over the ranks of `group` (all-reduce) as a differentiable op: its backward
/// all-reduces the gradient, so every rank must run the backward too (as with DDP). Collective.
Tensor all_reduce_sum(const Tensor& t, const std::shared_ptr<ProcessGroup>& group);

/// nn::CrossProcessSum over a process group (all_reduce_sum).
class GroupSum : public nn::CrossProcessSum {
 public:
  explicit GroupSum(std::shared_ptr<ProcessGroup> group);
  Tensor sum(const Tensor& t) override { return all_reduce_sum(t, group_); }
  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }

 private:
  std::shared_ptr<ProcessGroup> group_;
};

/// Makes every BatchNorm2d in `model` (itself included) a synchronized one over `group`, in place
/// (torch's SyncBatchNorm.convert_sync_batchnorm returns a copy with the layers replaced; a C++
/// parent holds its layers by their type, so here the layers stay and take the group). Parameters,
/// buffers and state_dict names are unchanged. Returns how many layers were converted. Call it on
/// every rank, before training (DDP wrapping order does not matter).
int convert_sync_batchnorm(nn::Module& model, const std::shared_ptr<ProcessGroup>& group);

}  // namespace kiln::dist

namespace kiln::nn {

/// A BatchNorm2d built synchronized (convert_sync_batchnorm does the same to existing layers).
class SyncBatchNorm : public BatchNorm2d {
 public:
  SyncBatchNorm(const BatchNormOptions& options, std::shared_ptr<dist::ProcessGroup> group);
  std::string name() const override { return "SyncBatchNorm"; }
};

}  // namespace kiln::nn
