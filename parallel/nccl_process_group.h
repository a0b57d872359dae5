// The NCCL process group: CUDA collectives (c10d's ProcessGroupNCCL). Built only with CUDA; this
// header has no CUDA includes. Rank 0 makes the NCCL unique id and shares it through the store
// (key "nccl/uid"); every rank then joins one communicator on `device`.
//
// Streams: each collective runs on the group's own high-priority communication stream, after
// that stream waits for the caller's current stream (so it sees the values the caller's kernels
// produce). Work::wait() makes the caller's current stream wait for the collective; it does not
// block the host (as torch), unless NcclOptions::blocking_wait is set. The tensors a collective
// uses are recorded on the communication stream with the caching allocator, so freeing them early
// cannot hand their memory to another kernel before the collective is done.
//
// Failures (Note [Watchdog] in parallel/watchdog.cpp, in the source tree): a watchdog thread polls every
// collective's completion and ncclCommGetAsyncError; when the oldest collective is not done `timeout` after
// it was issued, or NCCL reports an asynchronous error (a dead peer), it aborts the communicator
// (ncclCommAbort: the kernels quit) and every pending and later wait() (and every later collective) throws a
// DistributedError naming the collective, its sequence number and the ranks that had not started
// it, with the path of this rank's flight-recorder dump. A non-blocking wait() that already
// returned cannot throw: the caller's stream then runs on with the aborted collective's garbage
// and the next collective or wait() reports the failure. blocking_wait (KILN_NCCL_BLOCKING_WAIT=1
// under init_process_group) makes wait() block the host until completion or failure.
// Destruction finalizes a healthy communicator (bounded by the last collective's deadline) and
// aborts a failed one at once (Note [Destroying a NCCL group] in parallel/cuda/nccl_process_group.cpp, in the source tree, in the
// source tree). KILN_FAULT_INJECT (fault_injection.h) holds the communication stream or kills the rank at a
// chosen collective.
#pragma once

#include <memory>

#include <kiln/parallel/process_group.h>
#include <kiln/parallel/store.h>

namespace kiln::dist {

/// Options of the NCCL process group: timeout, device and blocking wait.
struct NcclOptions {
  Millis timeout_ = kDefaultTimeout;
  int device_ = -1;             ///< CUDA device of this rank; -1: the current device
  bool blocking_wait_ = false;  ///< Work::wait() blocks the host until the collective ends or fails
  NcclOptions& timeout(Millis t) { timeout_ = t; return *this; }
  NcclOptions& device(int d) { device_ = d; return *this; }
  NcclOptions& blocking_wait(bool b) { blocking_wait_ = b; return *this; }
};

/// Tensors are CUDA tensors on the group's device, contiguous; dtypes f32, f64, bf16, f16, i64,
/// i32, u8. avg uses ncclAvg (floating dtypes only, like the Gloo group).
std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      const NcclOptions& options = {});

/// "NCCL 2.28.3" or "built without NCCL".
std::string nccl_version();

}  // namespace kiln::dist
