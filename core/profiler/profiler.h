// The profiler's recording side: scoped ranges, instants and counters that cost one relaxed atomic
// load when profiling is off, and land in per-thread buffers when it is on. start()/stop() bound a
// session; stop() returns its Trace (trace.h writes it as Chrome trace-event JSON, summary.h sums it).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include <kiln/core/device.h>
#include <kiln/core/profiler/trace.h>

namespace kiln::profiler {

/// Note [Profiler cost when off]
/// Every hook is a Range (or instant/counter) whose constructor reads one relaxed atomic bool and
/// does nothing else when it is false: no clock read, no allocation, no lock, no thread-local
/// lookup. The rest lives out of line (begin/end in recorder.cpp), so the inline part stays a load
/// and a predicted branch; bench_profiler measures it (README "Profiling"). When on, each thread
/// appends to its own buffer under that buffer's own (uncontended) mutex, which stop() takes to
/// read it; a range that began in an earlier session is dropped at its end.
namespace detail {
extern std::atomic<bool> g_enabled;
void record_instant(const char* name, Category category, Arg a0, Arg a1) noexcept;
void record_counter(const char* name, Arg a0, Arg a1, Arg a2) noexcept;
}  // namespace detail

inline bool enabled() noexcept { return detail::g_enabled.load(std::memory_order_relaxed); }

/// Starts a session (clearing what an earlier one left) and turns recording on. Not nested.
void start();
/// Turns recording off and returns the session's events, every thread's (and, on CUDA, the device
/// spans, resolved to host time: Note [Device spans]). Events still being recorded by other threads
/// after it returns are dropped.
Trace stop();
/// Names the calling thread's track ("main", "gloo worker", ...); kept across sessions.
void set_thread_name(std::string name);

/// A timed, nested range on the calling thread's track (a Chrome "X" event). Up to kMaxArgs
/// integer arguments; keys must be string literals (they are stored as pointers).
class Range {
 public:
  Range(const char* name, Category category) noexcept {
    if (enabled()) [[unlikely]]
      begin(name, category, {});
  }
  Range(const char* name, Category category, Arg a0, Arg a1 = {}, Arg a2 = {}) noexcept {
    if (enabled()) [[unlikely]]
      begin(name, category, {a0, a1, a2});
  }
  /// A name computed only when profiling is on (e.g. an autograd node's name()); a name that
  /// cannot be made (out of memory) leaves the range unrecorded.
  template <class NameFn, class = std::enable_if_t<std::is_invocable_v<NameFn>>>
  Range(Category category, NameFn&& name_fn) noexcept {
    if (enabled()) [[unlikely]] {
      try {
        begin_named(name_fn(), category);
      } catch (...) {
        active_ = false;
      }
    }
  }
  ~Range() {
    if (active_) [[unlikely]]
      end();
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

  /// Adds (or overwrites) an argument before the range ends; nothing when not recording.
  void arg(const char* key, int64_t value) noexcept;
  bool recording() const noexcept { return active_; }

 private:
  void begin(const char* name, Category category, std::array<Arg, kMaxArgs> args) noexcept;
  void begin_named(std::string name, Category category) noexcept;
  void end() noexcept;

  bool active_ = false;
  Category category_ = Category::user;
  uint64_t session_ = 0;
  int64_t start_ns_ = 0;
  const char* name_ = nullptr;
  std::string dynamic_name_;
  std::array<Arg, kMaxArgs> args_{};
};

/// A point in time on the calling thread's track (Chrome "i").
inline void instant(const char* name, Category category, Arg a0 = {}, Arg a1 = {}) noexcept {
  if (enabled()) [[unlikely]]
    detail::record_instant(name, category, a0, a1);
}

/// A counter sample (Chrome "C"): up to kMaxArgs named series under one name, e.g. memory.
inline void counter(const char* name, Arg a0, Arg a1 = {}, Arg a2 = {}) noexcept {
  if (enabled()) [[unlikely]]
    detail::record_counter(name, a0, a1, a2);
}

/// Counter samples of the allocators: "cpu memory" {allocated, peak, cached} and, on CUDA, "cuda:<i>
/// memory" {allocated, peak, reserved} for `device` when it is a CUDA device. Called once per step
/// by the step schedule (step_schedule.h), after every module's forward (nn::call) and after every
/// backward node, so a trace shows allocated bytes rising through the forward and falling through
/// the backward.
void record_memory_counters(Device device = Device::cpu()) noexcept;

/// Note [Device spans]
/// On CUDA a DeviceRange records a timing event on `stream`'s device at its start and end (the
/// compute stream for ops, the communication stream for NCCL collectives), plus an NVTX range with
/// the same name, so Nsight shows Kiln's names. The events are read at stop(): each device gets an
/// anchor event recorded after a synchronize at its first span, whose host time is taken right
/// then, and a span's host time is that anchor's plus the event's elapsed time since it. A device
/// span lands on its own track per stream ("cuda:0 stream 7f.."). Nothing of this runs without
/// CUDA or when profiling is off.
class DeviceRange {
 public:
  /// On `device`'s current stream (the compute stream of an op).
  DeviceRange(const char* name, Category category, int device, Arg a0 = {}) noexcept {
    if (enabled()) [[unlikely]]
      begin(name, category, device, nullptr, false, a0);
  }
  /// On `stream`, a cudaStream_t of cuda device `device` (nullptr: its default stream).
  DeviceRange(const char* name, Category category, int device, void* stream, Arg a0 = {}) noexcept {
    if (enabled()) [[unlikely]]
      begin(name, category, device, stream, true, a0);
  }
  ~DeviceRange() {
    if (span_ >= 0) [[unlikely]]
      end();
  }
  DeviceRange(const DeviceRange&) = delete;
  DeviceRange& operator=(const DeviceRange&) = delete;

 private:
  void begin(const char* name, Category category, int device, void* stream, bool explicit_stream, Arg a0) noexcept;
  void end() noexcept;
  int64_t span_ = -1;  ///< index in this thread's pending device spans
  uint64_t session_ = 0;
};

/// Ranges visible in Nsight only when the CUDA build has NVTX (always with CUDA 12+: header-only).
bool nvtx_available();

}  // namespace kiln::profiler
