// Deferred device checks: ops that validate their inputs on the device (index bounds, class
// targets) hand their fault record here instead of reading it back at once, so a training step
// need not wait for the GPU. No CUDA headers; built in both configurations (without CUDA nothing
// is ever queued).
#pragma once

#include <kiln/core/cuda/runtime/fault_queue.h>
#include <kiln/core/tensor.h>
#include <kiln/cuda.h>

// Note [Deferred device checks]
// An index op or cross_entropy on CUDA checks every index in its kernel and records the first bad
// one (its row-major position and value) in a 2-element i64 record on the device. Reading that
// record at once costs a host sync per op: the host waits for the GPU to drain its queue, several
// times per training step (the embedding forward and backward, the loss). So by default
// (CheckMode::deferred) the op starts an asynchronous copy of the record into pinned host memory,
// records an event, queues it and returns; the record is looked at later, when it is on the host
// anyway:
//   - after every blocking copy from a device to the host (item(), to(cpu), to_vector: the
//     Trainer's log steps), which waits for the device, so every earlier record is there;
//   - at each later deferred check (without waiting: only records already there);
//   - when check_deferred_faults(true) is called (it waits for all of them).
// A fault found so throws the op's own error (same message: the value, its position, the valid
// range), marked as reported late. What the op wrote meanwhile is what the kernel writes for a bad
// index (zeros for lookups; embedding_backward and cross_entropy leave the bad rows out; the
// in-place scatter_add_ and index_add_ write nothing, their adding kernels skip on the device when
// the check before them found a bad index), so the failing step's results are garbage, as on any
// error. CheckMode::immediate (KILN_CUDA_CHECKS=immediate, like CUDA_LAUNCH_BLOCKING for kernel
// errors) reads each record in the op and throws there: one host sync per op.

namespace kiln::cuda {

// `record` is an op's (2,) i64 fault record on a CUDA device ([0] position or -1, [1] value),
// complete once the work queued so far on that device's current stream is. Immediate mode reads it
// now (a host sync) and calls raise(..., late = false) on a fault; deferred mode queues it.
void check_fault_record(const Tensor& record, RaiseFault raise);

// Deferred records not looked at yet (tests).
size_t deferred_faults_pending();

// While this thread captures a CUDA graph (is_capturing()) nothing can be queued (the captured copy
// and event would not run until a replay, and the replays queue nothing): check_fault_record keeps
// the record and its `raise` on a per-thread list instead. The graph's owner takes the list after
// the capture and reads the records after a replay (the Trainer: on log steps, for the step just
// replayed; Note [Whole-step CUDA graph]).
struct CapturedFault {
  Tensor record;
  RaiseFault raise;
};
std::vector<CapturedFault> take_captured_fault_records();
// Reads every record (a host sync) and raises the first fault, as reported late.
void check_captured_fault_records(const std::vector<CapturedFault>& faults);

}  // namespace kiln::cuda
