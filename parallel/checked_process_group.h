// A ProcessGroup decorator for KILN_DISTRIBUTED_DEBUG=DETAIL (torch's ProcessGroupWrapper): before
// every collective, the ranks all-gather a fixed-size description of it (sequence number, kind,
// reduce op, root, dtype, shape) and compare; a mismatch fails on every rank with an error naming
// the first rank that differs from rank 0 and both descriptions, instead of a hang or garbage.
// Costs one small all-gather per collective: for debugging, not for training runs.
#pragma once

#include <memory>
#include <string>

#include <kiln/parallel/process_group.h>

namespace kiln::dist {

/// Wraps a ProcessGroup and checks, before every collective, that all ranks issue the same one
/// (KILN_DISTRIBUTED_DEBUG=DETAIL; the file's header).
class CheckedProcessGroup final : public ProcessGroup {
 public:
  explicit CheckedProcessGroup(std::shared_ptr<ProcessGroup> inner);
  std::string backend() const override { return inner_->backend(); }
  Device device() const override { return inner_->device(); }
  const std::shared_ptr<ProcessGroup>& inner() const { return inner_; }
  int64_t collectives_checked() const { return checked_; }

  std::shared_ptr<Work> allreduce(Tensor& tensor, const AllreduceOptions& options = {}) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root = 0) override;
  std::shared_ptr<Work> allgather(Tensor& output, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(Tensor& output, const Tensor& input,
                                       const AllreduceOptions& options = {}) override;
  std::shared_ptr<Work> barrier() override;

 private:
  enum class Kind { allreduce = 1, broadcast, allgather, reduce_scatter, barrier };
  /// All-gathers this rank's description of the next collective and fails on a mismatch.
  void check(Kind kind, const Tensor* tensor, int root, ReduceOp op);

  std::shared_ptr<ProcessGroup> inner_;
  int64_t checked_ = 0;
};

}  // namespace kiln::dist
