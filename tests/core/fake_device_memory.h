// A fake device for the CUDA caching allocator's CPU tests: addresses that are never touched and
// events the test completes by hand (test_caching_allocator.cpp, test_caching_allocator_pools.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include <kiln/core/cuda/runtime/caching_allocator.h>
#include <kiln/core/error.h>

#include <doctest/doctest.h>

namespace kiln::test {

constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;

// Addresses from a bump pointer (segments 64 KiB apart, so none touch), a capacity that
// raw_malloc fails past, and events that are done only when the test says so.
class FakeDevice final : public cuda::DeviceMemory {
 public:
  explicit FakeDevice(size_t capacity = size_t(1) << 40) : capacity_(capacity) {}

  void* raw_malloc(size_t n) override {
    ++malloc_calls;
    if (used_ + n > capacity_) return nullptr;
    uintptr_t a = next_;
    next_ += n + 64 * kKiB;
    segments_[a] = n;
    used_ += n;
    return reinterpret_cast<void*>(a);
  }
  void raw_free(void* p) override {
    auto it = segments_.find(reinterpret_cast<uintptr_t>(p));
    REQUIRE_MESSAGE(it != segments_.end(), "raw_free of an address that is not a segment");
    used_ -= it->second;
    segments_.erase(it);
    ++free_calls;
  }
  void* record_event(cuda::Stream s) override {
    REQUIRE_MESSAGE(!forbid_events, "cudaEventRecord during a capture");
    if (fail_events) throw Error("fake cudaEventRecord failure");
    events_.push_back({s, false, false});
    return reinterpret_cast<void*>(events_.size());  // id = index + 1
  }
  bool event_done(void* e) override {
    REQUIRE_MESSAGE(!forbid_events, "cudaEventQuery during a capture");
    return event(e).done;
  }
  void synchronize_event(void* e) override {
    REQUIRE_MESSAGE(!forbid_events, "cudaEventSynchronize during a capture");
    event(e).done = true;
    ++synchronized;
  }
  void destroy_event(void* e) noexcept override { event(e).destroyed = true; }
  void memory_info(size_t& free_bytes, size_t& total_bytes) override {
    total_bytes = capacity_;
    free_bytes = capacity_ - used_;
  }

  void complete_events() {
    for (auto& e : events_) e.done = true;
  }
  size_t events_recorded() const { return events_.size(); }
  cuda::Stream event_stream(size_t i) const { return events_.at(i).stream; }
  bool all_events_destroyed() const {
    for (auto& e : events_)
      if (!e.destroyed) return false;
    return true;
  }
  size_t used() const { return used_; }
  size_t segments() const { return segments_.size(); }

  int malloc_calls = 0, free_calls = 0, synchronized = 0;
  bool fail_events = false;  // record_event throws, as a failed cudaEventRecord does
  bool forbid_events = false;  // any event call fails the test (CUDA forbids them during a capture)

 private:
  struct Event {
    cuda::Stream stream;
    bool done, destroyed;
  };
  Event& event(void* e) { return events_.at(reinterpret_cast<size_t>(e) - 1); }

  size_t capacity_, used_ = 0;
  uintptr_t next_ = 0x10000000;
  std::map<uintptr_t, size_t> segments_;
  std::vector<Event> events_;
};

}  // namespace kiln::test
