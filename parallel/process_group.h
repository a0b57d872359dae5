// ProcessGroup: collectives over a fixed set of ranks (c10d's ProcessGroup). Every call returns a
// Work to wait() on; the backend runs it asynchronously (Gloo on a background thread, NCCL on a
// communication stream). Every rank must issue the same collectives in the same order; each call
// gets a sequence number, and a failure or timeout names the collective, its sequence number and,
// where the backend can tell, the rank that did not take part.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/tensor.h>
#include <kiln/parallel/store.h>

namespace kiln::dist {

enum class ReduceOp { sum, avg, max, min };

/// A collective in flight: wait() for it (c10d's Work).
class Work {
 public:
  virtual ~Work() = default;
  /// Blocks until done; rethrows the collective's error (kiln::Error) if it failed.
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
};

/// Options of ProcessGroup::allreduce: the reduce op.
struct AllreduceOptions {
  ReduceOp op_ = ReduceOp::sum;
  AllreduceOptions& op(ReduceOp o) { op_ = o; return *this; }
};

/// A group of ranks and its collectives (c10d's ProcessGroup); each returns a Work to wait on.
/// Every rank must issue the same collectives in the same order.
class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }  ///< this process's rank, 0..size()-1
  int size() const { return size_; }  ///< the number of ranks
  virtual std::string backend() const = 0;  ///< "gloo" or "nccl" (as the group names itself)
  /// Where the tensors handed to this group live: the CPU for Gloo, the rank's GPU for NCCL.
  virtual Device device() const { return Device::cpu(); }

  /// In place on `tensor` (contiguous; same shape and dtype on every rank).
  virtual std::shared_ptr<Work> allreduce(Tensor& tensor, const AllreduceOptions& options = {}) = 0;
  /// In place: every rank ends with root's values.
  virtual std::shared_ptr<Work> broadcast(Tensor& tensor, int root = 0) = 0;
  /// output (size * input.numel(), contiguous) gets every rank's input, rank order.
  virtual std::shared_ptr<Work> allgather(Tensor& output, const Tensor& input) = 0;
  /// input (size * output.numel()) is reduced across ranks; rank r keeps chunk r in output.
  virtual std::shared_ptr<Work> reduce_scatter(Tensor& output, const Tensor& input,
                                               const AllreduceOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;  ///< completes once every rank has entered it

  /// Number of collectives issued so far (the next one's sequence number).
  uint64_t sequence_number() const { return seq_; }

 protected:
  uint64_t next_sequence_number() { return seq_++; }

 private:
  int rank_, size_;
  uint64_t seq_ = 0;
};

}  // namespace kiln::dist
