// The bookkeeping of deferred device checks (Note [Deferred device checks] in deferred_check.h),
// free of CUDA so the CPU tests check it: records queued in issue order, retired once they reached
// the host, and the first fault among them raised with the op's own message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>

namespace kiln::cuda {

// What a check found: the row-major position of the first bad input (-1: none) and its value.
struct FaultRecord {
  int64_t position = -1;
  int64_t value = 0;
};

// Throws the op's error for a fault at `position` holding `value`; `late` when it is reported
// after the op returned (at a later host sync) rather than by the op itself.
using RaiseFault = std::function<void(int64_t position, int64_t value, bool late)>;

class FaultQueue {
 public:
  struct Entry {
    std::function<bool()> done;         // the record has reached the host (never blocks)
    std::function<void()> wait;         // blocks until it has
    std::function<FaultRecord()> read;  // the record, once done
    RaiseFault raise;
  };

  // More entries than this make push() wait for the oldest (a host sync), so a host running far
  // ahead of the device keeps a bounded queue.
  static constexpr size_t kMaxPending = 1024;

  // Raises a fault among the entries already done (as poll()), then queues `entry`.
  void push(Entry entry);
  // Retires the leading entries that are done, in issue order; on the first one with a fault the
  // queue is emptied (later faults are usually its consequences) and its error raised (late).
  void poll();
  // Waits for every entry, then as poll(): nothing is pending afterwards.
  void drain();
  size_t size() const;

 private:
  // Retires done entries from the front (all of them when `all`, waiting); returns the first fault.
  bool take_fault(bool all, Entry& faulty, FaultRecord& record);

  mutable std::mutex mu_;
  std::deque<Entry> entries_;
};

}  // namespace kiln::cuda
