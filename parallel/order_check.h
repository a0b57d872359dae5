// The collective-order check of DDP's reducer: codes written into every bucket's tail before its
// all-reduce and compared across ranks after it, so ranks that reduce different buckets fail loudly
// instead of silently averaging unrelated gradients. Note [Bucket order check] in parallel/order_check.cpp,
// in the source tree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/tensor.h>

namespace kiln::dist {

/// When the reducer reads the order check (Note [Bucket order check] in parallel/order_check.cpp, in the source tree) back to the host (Note [Deferred
/// order check]; both in parallel/order_check.cpp, in the source tree).
enum class OrderCheck {
  automatic,        ///< every iteration on the CPU, with find_unused_parameters or KILN_DISTRIBUTED_DEBUG
                    ///< INFO/DETAIL; else (CUDA) the first two synced iterations, then deferred
  every_iteration,  ///< one host read at the end of every synced backward
  deferred,         ///< compared on the device; read by check_collective_order() (no host read)
};

/// One per Reducer. The reducer owns the buckets and their tails; this class owns the first
/// `slots(dtype)` values of every tail (3 codes per rank, each a few digits) and what they must
/// read after the sum. Not
/// collective: it only writes and reads tensors the reducer all-reduces anyway.
class OrderChecker {
 public:
  OrderChecker(int rank, int world_size, OrderCheck mode);

  /// Tail values the check takes at the start of the tail of a bucket of `dtype` (the digits of
  /// a code depend on the dtype; Note [Bucket order check] in parallel/order_check.cpp, in the source tree).
  int64_t slots(DType dtype) const;
  /// The buckets were (re)built: per-bucket state starts over. A deferred record is laid out per
  /// bucket, so the reducer reads it (read_deferred) before it rebuilds.
  void reset(size_t bucket_count);
  /// Before bucket `b` is all-reduced as the group's collective number `sequence`: this rank's codes
  /// into its own slots of `tail` (host values of the tail, zeros elsewhere). `dtype` is the
  /// bucket's dtype, which bounds the digits (a comm hook's f64 side tail uses the same layout).
  void write_codes(std::vector<double>& tail, size_t b, int64_t iteration, uint64_t sequence, DType dtype);

  /// Whether the check at the end of `iteration` reads the tails on the host (else defer()).
  /// `on_cuda`: the buckets live on a CUDA device.
  bool read_on_host(int64_t iteration, bool on_cuda) const;
  /// The failure for bucket `b`, given its tail after the sum read back as doubles; "" when every
  /// rank reduced what this rank did.
  std::string mismatch(size_t b, const std::vector<double>& tail, int64_t iteration) const;
  /// The immediate check of every bucket's tail read on the host: throws DistributedError naming
  /// the first bucket that differs.
  void check(const std::vector<std::vector<double>>& tails, int64_t iteration);
  /// Note [Deferred order check] in parallel/order_check.cpp, in the source tree: compares every bucket's
  /// tail (`tails`, on the device) with what it should hold, on the device, and keeps the first iteration
  /// that differed.
  void defer(const std::vector<Tensor>& tails, int64_t iteration);
  /// Whether defer() ran since the last read_deferred().
  bool has_deferred() const { return pending_ > 0; }
  /// Reads what defer() compared since the last call (one host read; nothing when there is
  /// nothing): the failure message, "" when every rank agreed. `iteration` is the reducer's current
  /// one, for the message.
  std::string read_deferred(int64_t iteration);

  int64_t checks_on_host() const { return host_checks_; }
  int64_t checks_deferred() const { return deferred_checks_; }

 private:
  int rank_;
  int world_size_;
  OrderCheck mode_;
  bool debug_ = false;              ///< KILN_DISTRIBUTED_DEBUG is INFO or DETAIL
  std::vector<uint64_t> sequence_;  ///< per bucket: the group's sequence number at launch
  std::vector<DType> dtype_;        ///< per bucket: the dtype its codes were written for

  /// Note [Deferred order check] in parallel/order_check.cpp, in the source tree: compared on the device
  /// since the last read_deferred().
  int64_t pending_ = 0;        ///< iterations compared on the device and not read yet
  Tensor mismatched_slots_;    ///< 0-dim f64: code slots that differed, summed
  Tensor first_mismatch_;      ///< the codes of the first iteration with a difference

  int64_t host_checks_ = 0, deferred_checks_ = 0;
};

}  // namespace kiln::dist
