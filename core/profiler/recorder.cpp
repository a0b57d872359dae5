// The profiler's recording side (profiler.h): the session switch, per-thread buffers, ranges,
// instants, counters, NVTX ranges, and the CUDA device spans resolved at stop().
#include <kiln/core/profiler/profiler.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

#include <kiln/core/cpu_allocator.h>
#include <kiln/core/cuda/runtime/stream.h>

#if defined(KILN_WITH_CUDA) && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define KILN_HAVE_NVTX 1
#endif

namespace kiln::profiler {

namespace detail {
std::atomic<bool> g_enabled{false};
}

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct PendingDeviceSpan {
  std::string name;
  Category category = Category::op;
  int device = 0;
  void* stream = nullptr;
  Arg a0;
  std::unique_ptr<cuda::Event> start, end;
};

struct ThreadBuffer {
  std::mutex mutex;
  bool main_thread = false;  // set before the registry publishes it, never changed: read without `mutex`
  std::string name;          // set_thread_name renames it under `mutex`
  uint64_t session = 0;  // the session its events belong to
  std::vector<TraceEvent> events;
  std::vector<PendingDeviceSpan> spans;
};

struct DeviceAnchor {
  std::unique_ptr<cuda::Event> event;
  int64_t host_ns = 0;
};

struct Registry {
  std::mutex mutex;  // guards buffers, anchors and the session number's changes
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::map<int, DeviceAnchor> anchors;
  std::atomic<uint64_t> session{0};
  size_t unnamed = 0;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: threads may record during static destruction
  return *r;
}

ThreadBuffer& my_buffer() {
  thread_local std::shared_ptr<ThreadBuffer> buffer = [] {
    auto b = std::make_shared<ThreadBuffer>();
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    b->main_thread = ::getpid() == static_cast<pid_t>(::syscall(SYS_gettid));
    b->name = b->main_thread ? "main" : "thread " + std::to_string(++r.unnamed);
    r.buffers.push_back(b);
    return b;
  }();
  return *buffer;
}

// The buffer, emptied first when it still holds an earlier session's events. Call with its mutex held.
void enter_session(ThreadBuffer& b, uint64_t session) {
  if (b.session == session) return;
  b.events.clear();
  b.spans.clear();
  b.session = session;
}

void append(TraceEvent&& e, uint64_t session) noexcept {
  try {
    ThreadBuffer& b = my_buffer();
    std::lock_guard<std::mutex> lock(b.mutex);
    if (session != registry().session.load(std::memory_order_relaxed)) return;  // began in an earlier session
    enter_session(b, session);
    b.events.push_back(std::move(e));
  } catch (...) {
    // Out of memory while profiling: the event is lost, the program goes on.
  }
}

void nvtx_push([[maybe_unused]] const char* name) {
#ifdef KILN_HAVE_NVTX
  nvtxRangePushA(name);
#endif
}

void nvtx_pop() {
#ifdef KILN_HAVE_NVTX
  nvtxRangePop();
#endif
}

// A device's anchor: an event recorded after the device finished its queued work, and the host
// time at which it completed (Note [Device spans]). Call with the registry's mutex held.
DeviceAnchor& anchor_of(int device, cuda::Stream stream) {
  Registry& r = registry();
  auto it = r.anchors.find(device);
  if (it != r.anchors.end()) return it->second;
  DeviceAnchor a;
  a.event = std::make_unique<cuda::Event>(/*enable_timing=*/true);
  stream.synchronize();
  a.event->record(stream);
  a.event->synchronize();
  a.host_ns = now_ns();
  return r.anchors.emplace(device, std::move(a)).first->second;
}

// Turns the device spans of every buffer into events on per-stream tracks. Call with the
// registry's mutex held and recording off.
void resolve_device_spans(Trace& trace, std::vector<std::vector<PendingDeviceSpan>>& pending) {
  std::map<std::pair<int, void*>, uint32_t> track_of;
  for (auto& spans : pending) {
    for (PendingDeviceSpan& s : spans) {
      if (!s.end) continue;  // still open when the session stopped
      auto it = registry().anchors.find(s.device);
      if (it == registry().anchors.end()) continue;
      try {
        s.end->synchronize();
        const double begin_ms = it->second.event->elapsed_ms(*s.start);
        const double end_ms = it->second.event->elapsed_ms(*s.end);
        auto key = std::make_pair(s.device, s.stream);
        auto [t, fresh] = track_of.emplace(key, uint32_t(trace.tracks.size()));
        if (fresh) {
          std::ostringstream name;
          name << "cuda:" << s.device << " stream " << s.stream;
          trace.tracks.push_back({name.str(), true});
        }
        TraceEvent e;
        e.name = std::move(s.name);
        e.category = s.category;
        e.track = t->second;
        e.start_ns = it->second.host_ns + int64_t(begin_ms * 1e6);
        e.duration_ns = std::max<int64_t>(0, int64_t((end_ms - begin_ms) * 1e6));
        e.args[0] = s.a0;
        trace.events.push_back(std::move(e));
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "kiln: profiler: a CUDA span '%s' could not be read: %s\n", s.name.c_str(), ex.what());
      }
    }
  }
}

}  // namespace

const char* category_name(Category c) {
  switch (c) {
    case Category::op: return "op";
    case Category::backward: return "backward";
    case Category::reducer: return "reducer";
    case Category::comm: return "comm";
    case Category::optimizer: return "optimizer";
    case Category::data: return "data";
    case Category::checkpoint: return "checkpoint";
    case Category::step: return "step";
    case Category::memory: return "memory";
    case Category::user: return "user";
  }
  return "user";
}

void start() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.anchors.clear();
  // Buffers only the registry still holds belong to threads that have ended.
  std::erase_if(r.buffers, [](const std::shared_ptr<ThreadBuffer>& b) { return b.use_count() == 1; });
  r.session.fetch_add(1, std::memory_order_relaxed);  // buffers empty themselves on their next event
  detail::g_enabled.store(true, std::memory_order_relaxed);
}

Trace stop() {
  detail::g_enabled.store(false, std::memory_order_relaxed);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const uint64_t session = r.session.load(std::memory_order_relaxed);
  Trace trace;
  std::vector<std::vector<PendingDeviceSpan>> pending;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers = r.buffers;
  std::stable_partition(buffers.begin(), buffers.end(), [](const auto& b) { return b->main_thread; });
  for (auto& b : buffers) {
    std::lock_guard<std::mutex> buffer_lock(b->mutex);
    if (b->session != session || (b->events.empty() && b->spans.empty())) continue;
    const uint32_t track = uint32_t(trace.tracks.size());
    trace.tracks.push_back({b->name, false});
    for (TraceEvent& e : b->events) {
      e.track = track;
      trace.events.push_back(std::move(e));
    }
    pending.push_back(std::move(b->spans));
    b->events.clear();
    b->spans.clear();
  }
  if (!r.anchors.empty()) resolve_device_spans(trace, pending);
  r.anchors.clear();
  r.session.fetch_add(1, std::memory_order_relaxed);  // late ends of this session's ranges are dropped
  std::stable_sort(trace.events.begin(), trace.events.end(), [](const TraceEvent& a, const TraceEvent& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.duration_ns > b.duration_ns;
  });
  return trace;
}

void set_thread_name(std::string name) {
  ThreadBuffer& b = my_buffer();
  std::lock_guard<std::mutex> lock(b.mutex);
  b.name = std::move(name);
}

bool nvtx_available() {
#ifdef KILN_HAVE_NVTX
  return true;
#else
  return false;
#endif
}

void Range::begin(const char* name, Category category, std::array<Arg, kMaxArgs> args) noexcept {
  name_ = name;
  category_ = category;
  args_ = args;
  session_ = registry().session.load(std::memory_order_relaxed);
  active_ = true;
  nvtx_push(name);
  start_ns_ = now_ns();
}

void Range::begin_named(std::string name, Category category) noexcept {
  dynamic_name_ = std::move(name);
  begin(dynamic_name_.c_str(), category, {});
}

void Range::arg(const char* key, int64_t value) noexcept {
  if (!active_) return;
  for (Arg& a : args_)
    if (a.key == nullptr || a.key == key) {
      a = {key, value};
      return;
    }
}

void Range::end() noexcept {
  const int64_t end_ns = now_ns();
  active_ = false;
  nvtx_pop();
  TraceEvent e;
  try {
    e.name = dynamic_name_.empty() ? std::string(name_) : std::move(dynamic_name_);
  } catch (...) {
    return;
  }
  e.category = category_;
  e.start_ns = start_ns_;
  e.duration_ns = end_ns - start_ns_;
  e.args = args_;
  append(std::move(e), session_);
}

namespace detail {

void record_instant(const char* name, Category category, Arg a0, Arg a1) noexcept {
  try {
    TraceEvent e;
    e.name = name;
    e.category = category;
    e.phase = Phase::instant;
    e.start_ns = now_ns();
    e.args = {a0, a1, Arg{}};
    append(std::move(e), registry().session.load(std::memory_order_relaxed));
  } catch (...) {
  }
}

void record_counter(const char* name, Arg a0, Arg a1, Arg a2) noexcept {
  try {
    TraceEvent e;
    e.name = name;
    e.category = Category::memory;
    e.phase = Phase::counter;
    e.start_ns = now_ns();
    e.args = {a0, a1, a2};
    append(std::move(e), registry().session.load(std::memory_order_relaxed));
  } catch (...) {
  }
}

}  // namespace detail

void record_memory_counters(Device device) noexcept {
  if (!enabled()) return;
  const CpuAllocatorStats s = cpu_allocator_stats();
  counter("cpu memory", {"allocated", int64_t(s.allocated_bytes)}, {"peak", int64_t(s.peak_allocated_bytes)},
          {"cached", int64_t(s.cached_bytes)});
  if constexpr (cuda::kBuilt) {
    if (!device.is_cuda()) return;
    try {
      const cuda::MemoryStats m = cuda::memory_stats(device.index);
      // One name per device; the names are literals because counter() keeps the pointer.
      static const char* const kNames[] = {"cuda:0 memory", "cuda:1 memory", "cuda:2 memory", "cuda:3 memory",
                                           "cuda:4 memory", "cuda:5 memory", "cuda:6 memory", "cuda:7 memory"};
      const char* name = device.index >= 0 && device.index < 8 ? kNames[device.index] : "cuda memory";
      counter(name, {"allocated", m.allocated_bytes}, {"peak", m.peak_allocated_bytes},
              {"reserved", m.reserved_bytes});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: profiler: reading cuda:%d's memory statistics failed: %s\n", device.index, e.what());
    }
  }
}

void DeviceRange::begin(const char* name, Category category, int device, void* stream, bool explicit_stream,
                        Arg a0) noexcept {
  if constexpr (!cuda::kBuilt) {
    (void)name, (void)category, (void)device, (void)stream, (void)explicit_stream, (void)a0;
    return;
  } else {
    // A timing event recorded in a CUDA graph capture could not be read back later: a captured
    // step shows as the replay's host time only (Note [Whole-step CUDA graph]).
    if (cuda::is_capturing()) return;
    try {
      const cuda::Stream s = explicit_stream ? cuda::Stream(stream, device) : cuda::current_stream(device);
      const uint64_t session = registry().session.load(std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> lock(registry().mutex);
        anchor_of(device, s);
      }
      PendingDeviceSpan span;
      span.name = name;
      span.category = category;
      span.device = device;
      span.stream = s.handle();
      span.a0 = a0;
      span.start = std::make_unique<cuda::Event>(/*enable_timing=*/true);
      span.start->record(s);
      ThreadBuffer& b = my_buffer();
      std::lock_guard<std::mutex> lock(b.mutex);
      if (session != registry().session.load(std::memory_order_relaxed)) return;
      enter_session(b, session);
      span_ = int64_t(b.spans.size());
      session_ = session;
      b.spans.push_back(std::move(span));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: profiler: a CUDA span '%s' could not start: %s\n", name, e.what());
    }
  }
}

void DeviceRange::end() noexcept {
  const int64_t index = span_;
  span_ = -1;
  try {
    ThreadBuffer& b = my_buffer();
    std::lock_guard<std::mutex> lock(b.mutex);
    if (b.session != session_ || index >= int64_t(b.spans.size())) return;  // the session ended meanwhile
    PendingDeviceSpan& s = b.spans[size_t(index)];
    s.end = std::make_unique<cuda::Event>(/*enable_timing=*/true);
    s.end->record(cuda::Stream(s.stream, s.device));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: profiler: a CUDA span could not end: %s\n", e.what());
  }
}

}  // namespace kiln::profiler
