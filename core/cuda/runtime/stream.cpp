// Streams, events and the current device. Built in both configurations: without CUDA every
// call that would touch a device fails saying Kiln was built without CUDA.
#include <kiln/core/cuda/runtime/stream.h>

#include <kiln/core/cuda/runtime/graph.h>

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include <kiln/core/error.h>

#if KILN_WITH_CUDA
#include <cuda_runtime.h>

#include <kiln/core/cuda/runtime/check.cuh>
#endif

namespace kiln::cuda {

namespace {
std::atomic<int64_t> host_syncs{0};
thread_local int captures_on_this_thread = 0;  // Note [CUDA graphs] (graph.h)
}  // namespace

int64_t host_sync_count() { return host_syncs.load(std::memory_order_relaxed); }

void note_host_sync() {
  KILN_CHECK(captures_on_this_thread == 0, "cannot wait for the device (item(), to(cpu), a blocking copy or a "
             "synchronize) while this thread captures a CUDA graph: the captured work has not run yet. Read the "
             "value after the graph's replay (the Trainer reads only on log steps, after it)");
  host_syncs.fetch_add(1, std::memory_order_relaxed);
}

bool is_capturing() { return captures_on_this_thread > 0; }

namespace detail {
CaptureScope::CaptureScope() { ++captures_on_this_thread; }
CaptureScope::~CaptureScope() { --captures_on_this_thread; }
}  // namespace detail

#if KILN_WITH_CUDA

namespace {

constexpr int kMaxDevices = 16;
constexpr int kPoolSize = 8;

thread_local std::array<Stream, kMaxDevices> tls_current = [] {
  std::array<Stream, kMaxDevices> s;
  for (int d = 0; d < kMaxDevices; ++d) s[d] = Stream::default_stream(d);
  return s;
}();

void check_device(int device) {
  KILN_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index ", device, " is out of range [0, ",
             kMaxDevices, ")");
}

}  // namespace

Stream Stream::create(int device, bool high_priority) {
  check_device(device);
  static std::mutex mu;
  static std::array<std::vector<cudaStream_t>, kMaxDevices> pools[2];
  static std::array<int, kMaxDevices> next[2] = {};
  std::lock_guard<std::mutex> lock(mu);
  auto& pool = pools[high_priority][device];
  if (pool.size() < kPoolSize) {
    DeviceGuard guard(device);
    int lo = 0, hi = 0;
    KILN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaStream_t s = nullptr;
    KILN_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, high_priority ? hi : lo));
    pool.push_back(s);
    return Stream(s, device);
  }
  int i = next[high_priority][device]++ % kPoolSize;
  return Stream(pool[i], device);
}

Stream Stream::create_unshared(int device) {
  check_device(device);
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s, device);
}

void Stream::synchronize() const {
  note_host_sync();
  DeviceGuard guard(device_);
  KILN_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
}

bool Stream::query() const {
  DeviceGuard guard(device_);
  return query_done(cudaStreamQuery(static_cast<cudaStream_t>(handle_)));
}

Stream current_stream(int device) {
  if (device < 0) device = current_device();
  check_device(device);
  return tls_current[device];
}

void set_current_stream(Stream stream) {
  check_device(stream.device());
  tls_current[stream.device()] = stream;
}

StreamGuard::StreamGuard(Stream stream)
    : previous_(current_stream(stream.device())), previous_device_(current_device()) {
  set_device(stream.device());
  set_current_stream(stream);
}

StreamGuard::~StreamGuard() {
  tls_current[previous_.device()] = previous_;
  (void)cudaSetDevice(previous_device_);
}

Event::Event(bool enable_timing) : timing_(enable_timing) {}

Event::~Event() {
  if (handle_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}

Event::Event(Event&& other) noexcept : handle_(other.handle_), timing_(other.timing_), device_(other.device_) {
  other.handle_ = nullptr;
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (handle_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
    handle_ = other.handle_;
    timing_ = other.timing_;
    device_ = other.device_;
    other.handle_ = nullptr;
  }
  return *this;
}

void Event::record(Stream stream) {
  DeviceGuard guard(stream.device());
  if (!handle_) {
    cudaEvent_t e = nullptr;
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    handle_ = e;
    device_ = stream.device();
  }
  KILN_CHECK(device_ == stream.device(), "Event::record: the event belongs to cuda:", device_,
             " but the stream to cuda:", stream.device());
  KILN_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_), static_cast<cudaStream_t>(stream.handle())));
}

void Event::wait(Stream stream) const {
  if (!handle_) return;  // never recorded: nothing to wait for (as torch)
  DeviceGuard guard(stream.device());
  KILN_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle()), static_cast<cudaEvent_t>(handle_), 0));
}

void Event::synchronize() const {
  if (!handle_) return;
  note_host_sync();
  KILN_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)));
}

bool Event::query() const {
  if (!handle_) return true;
  return query_done(cudaEventQuery(static_cast<cudaEvent_t>(handle_)));
}

float Event::elapsed_ms(const Event& end) const {
  KILN_CHECK(timing_ && end.timing_, "Event::elapsed_ms: both events need enable_timing = true");
  KILN_CHECK(handle_ && end.handle_, "Event::elapsed_ms: both events have to be recorded first");
  float ms = 0;
  KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(handle_), static_cast<cudaEvent_t>(end.handle_)));
  return ms;
}

int current_device() {
  int d = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) {
  check_device(device);
  KILN_CUDA_CHECK(cudaSetDevice(device));
}

void synchronize(int device) {
  note_host_sync();
  DeviceGuard guard(device < 0 ? current_device() : device);
  KILN_CUDA_CHECK(cudaDeviceSynchronize());
}

DeviceGuard::DeviceGuard(int device) : previous_(current_device()) {
  if (device != previous_) set_device(device);
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
}

#else  // built without CUDA

[[noreturn]] static void no_cuda(const char* what) {
  KILN_FAIL(what, ": Kiln was built without CUDA (configure with -DKILN_CUDA=ON)");
  __builtin_unreachable();
}

Stream Stream::create(int, bool) { no_cuda("Stream::create"); }
Stream Stream::create_unshared(int) { no_cuda("Stream::create_unshared"); }
void Stream::synchronize() const { no_cuda("Stream::synchronize"); }
bool Stream::query() const { no_cuda("Stream::query"); }
Stream current_stream(int) { no_cuda("current_stream"); }
void set_current_stream(Stream) { no_cuda("set_current_stream"); }
StreamGuard::StreamGuard(Stream) { no_cuda("StreamGuard"); }
StreamGuard::~StreamGuard() = default;
Event::Event(bool) {}
Event::~Event() = default;
Event::Event(Event&&) noexcept {}
Event& Event::operator=(Event&&) noexcept { return *this; }
void Event::record(Stream) { no_cuda("Event::record"); }
void Event::wait(Stream) const { no_cuda("Event::wait"); }
void Event::synchronize() const { no_cuda("Event::synchronize"); }
bool Event::query() const { no_cuda("Event::query"); }
float Event::elapsed_ms(const Event&) const { no_cuda("Event::elapsed_ms"); }
int current_device() { no_cuda("current_device"); }
void set_device(int) { no_cuda("set_device"); }
void synchronize(int) { no_cuda("synchronize"); }
DeviceGuard::DeviceGuard(int) { no_cuda("DeviceGuard"); }
DeviceGuard::~DeviceGuard() = default;

#endif

}  // namespace kiln::cuda
