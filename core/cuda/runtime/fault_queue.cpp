// FaultQueue: see fault_queue.h. The lock is released before an error is raised, and an entry's
// wait() runs without it (it may block on the device).
#include <kiln/core/cuda/runtime/fault_queue.h>

#include <utility>

namespace kiln::cuda {

bool FaultQueue::take_fault(bool all, Entry& faulty, FaultRecord& record) {
  for (;;) {
    Entry front;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (entries_.empty()) return false;
      if (!entries_.front().done()) {
        if (!all) return false;
        front = entries_.front();  // wait outside the lock, then look again
      } else {
        front = std::move(entries_.front());
        entries_.pop_front();
        record = front.read();
        if (record.position < 0) continue;
        entries_.clear();
        faulty = std::move(front);
        return true;
      }
    }
    front.wait();
  }
}

void FaultQueue::poll() {
  Entry faulty;
  FaultRecord record;
  if (take_fault(false, faulty, record)) faulty.raise(record.position, record.value, /*late=*/true);
}

void FaultQueue::drain() {
  Entry faulty;
  FaultRecord record;
  if (take_fault(true, faulty, record)) faulty.raise(record.position, record.value, /*late=*/true);
}

void FaultQueue::push(Entry entry) {
  poll();
  Entry oldest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back(std::move(entry));
    if (entries_.size() <= kMaxPending) return;
    oldest = entries_.front();
  }
  oldest.wait();
  poll();
}

size_t FaultQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace kiln::cuda
