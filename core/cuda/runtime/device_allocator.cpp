// The CUDA allocators: the caching device allocator (one CachingAllocator per device over
// cudaMalloc/cudaFree and cudaEvents; see Note [Caching allocator]) and the caching allocator of
// pinned host memory. Both are created on first use and never destroyed, so tensors that die
// during static destruction still find them.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <kiln/core/cuda/runtime/caching_allocator.h>
#include <kiln/core/cuda/runtime/graph.h>
#include <kiln/core/cuda/runtime/check.cuh>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/cuda/runtime/stream.h>
#include <kiln/core/storage.h>
#include <kiln/core/tensor.h>

namespace kiln::cuda {

namespace {

constexpr int kMaxDevices = 16;  // as stream.cpp

// Note [cudaMalloc during a capture]
// cuda::Graph captures in cudaStreamCaptureModeThreadLocal, which bars the capturing thread from
// "potentially unsafe" API calls, cudaMalloc the first of them: the call fails with
// cudaErrorStreamCaptureUnsupported and invalidates the capture. Yet a capture must allocate: its
// private pool starts empty (Note [Graph pools]) and the Trainer empties the cache just before, so
// the captured step's first tensor reaches raw_malloc. cudaMalloc itself is safe here (it does not
// enqueue work or synchronize the capturing stream), so the thread switches to the relaxed mode
// around that one call and back, as PyTorch's allocator does (cudaMallocMaybeCapturing). cudaFree
// and event queries stay barred: the caching allocator makes none while a capture is under way.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { KILN_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode_)); }
  ~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }  // restores the caller's mode
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

class CudaDeviceMemory final : public DeviceMemory {
 public:
  explicit CudaDeviceMemory(int device) : device_(device) {}

  void* raw_malloc(size_t nbytes) override {
    DeviceGuard guard(device_);
    void* p = nullptr;
    cudaError_t err;
    {
      RelaxedCaptureMode relaxed;  // Note [cudaMalloc during a capture]
      err = cudaMalloc(&p, nbytes);
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky; clear it so the next launch check does not see it
      return nullptr;
    }
    KILN_CUDA_CHECK(err);
    return p;
  }
  void raw_free(void* ptr) override {
    DeviceGuard guard(device_);
    KILN_CUDA_CHECK(cudaFree(ptr));
  }
  void* record_event(Stream stream) override {
    DeviceGuard guard(stream.device());
    cudaEvent_t e = nullptr;
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    cudaError_t err = cudaEventRecord(e, static_cast<cudaStream_t>(stream.handle()));
    if (err != cudaSuccess) (void)cudaEventDestroy(e);
    KILN_CUDA_CHECK(err);
    return e;
  }
  bool event_done(void* event) override { return query_done(cudaEventQuery(static_cast<cudaEvent_t>(event))); }
  void synchronize_event(void* event) override {
    note_host_sync();
    KILN_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  }
  void destroy_event(void* event) noexcept override { (void)cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
  void memory_info(size_t& free_bytes, size_t& total_bytes) override {
    DeviceGuard guard(device_);
    KILN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  }

 private:
  int device_;
};

// The Allocator installed for DeviceType::CUDA: routes each request to its device's cache and
// allocates for the device's current stream.
class CudaCachingAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override { return allocate_on(nbytes, Device::cuda(current_device())); }
  void* allocate_on(size_t nbytes, Device device) override {
    if (nbytes == 0) return nullptr;
    return cache(device.index).allocate(nbytes, current_stream(device.index));
  }
  void deallocate(void* ptr, size_t nbytes) noexcept override {
    if (ptr == nullptr) return;
    for (int d = 0; d < kMaxDevices; ++d) {
      CachingAllocator* c = caches_[d].load(std::memory_order_acquire);
      if (c && c->owns(ptr)) return deallocate_on(ptr, nbytes, Device::cuda(d));
    }
    std::fprintf(stderr, "kiln: CUDA free of %zu bytes at %p, which no device's allocator handed out\n", nbytes, ptr);
  }
  void deallocate_on(void* ptr, size_t nbytes, Device device) noexcept override {
    if (ptr == nullptr) return;
    try {
      cache(device.index).free(ptr);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: CUDA free of %zu bytes on %s failed: %s\n", nbytes, device.str().c_str(), e.what());
    }
  }

  CachingAllocator& cache(int device) {
    KILN_CHECK(device >= 0 && device < kMaxDevices && device < device_count(), "CUDA device index ", device,
               " is out of range: ", device_count(), " device(s) available");
    if (CachingAllocator* c = caches_[device].load(std::memory_order_acquire)) return *c;
    std::lock_guard<std::mutex> lock(create_mu_);
    if (CachingAllocator* c = caches_[device].load(std::memory_order_acquire)) return *c;
    auto* memory = new CudaDeviceMemory(device);  // lives as long as the process, like the cache
    auto* c = new CachingAllocator(*memory, "cuda:" + std::to_string(device));
    caches_[device].store(c, std::memory_order_release);
    return *c;
  }
  CachingAllocator* cache_if_created(int device) const {
    return device >= 0 && device < kMaxDevices ? caches_[device].load(std::memory_order_acquire) : nullptr;
  }

 private:
  std::array<std::atomic<CachingAllocator*>, kMaxDevices> caches_{};
  std::mutex create_mu_;
};

CudaCachingAllocator& device_cache() {
  static auto* a = new CudaCachingAllocator();
  return *a;
}

// Pinned host memory: sizes round up to a power of two (at least 512 B), and freed blocks are
// kept per size. A block an asynchronous copy used (record_use) is reused only after the events
// recorded on those streams have completed, so a copy still reading it is never overwritten.
class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    KILN_CHECK(nbytes <= (size_t(1) << 62), "pin_memory: ", nbytes, " bytes is more than any host has");
    const size_t size = std::bit_ceil(std::max<size_t>(nbytes, 512));
    std::lock_guard<std::mutex> lock(mu_);
    process_pending();
    if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      blocks_.at(p).allocated = true;
      return p;
    }
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, size, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_free_blocks();
      err = cudaHostAlloc(&p, size, cudaHostAllocPortable);
      if (err == cudaErrorMemoryAllocation) (void)cudaGetLastError();
    }
    KILN_CHECK_AS(OutOfMemoryError, err == cudaSuccess, "pin_memory: cudaHostAlloc of ", size, " bytes (for ", nbytes,
                  " requested) failed: ", cudaGetErrorString(err));
    blocks_.emplace(p, Block{size, true, {}});
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) noexcept override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) {
      std::fprintf(stderr, "kiln: free of %zu pinned bytes at %p, which the pinned allocator did not hand out\n",
                   nbytes, ptr);
      return;
    }
    it->second.allocated = false;
    if (it->second.events.empty())
      free_[it->second.size].push_back(ptr);
    else
      pending_.push_back(ptr);
  }

  // `base` (a block's start) is read or written by work queued on `stream`.
  void record_use(void* base, Stream stream) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(base);
    KILN_CHECK(it != blocks_.end() && it->second.allocated, "record_stream: ", base,
               " is not a live block of the pinned host allocator");
    // One event per stream: recording again moves it past the newer work (streams run in order).
    for (auto& [s, e] : it->second.events)
      if (s == stream) {
        DeviceGuard guard(stream.device());
        KILN_CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(stream.handle())));
        return;
      }
    DeviceGuard guard(stream.device());
    cudaEvent_t e = nullptr;
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    it->second.events.emplace_back(stream, e);
    KILN_CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(stream.handle())));
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (void* p : pending_)
      for (auto& [s, e] : blocks_.at(p).events) {
        note_host_sync();
        KILN_CUDA_CHECK(cudaEventSynchronize(e));
      }
    process_pending();
    release_free_blocks();
  }

 private:
  struct Block {
    size_t size;
    bool allocated;
    std::vector<std::pair<Stream, cudaEvent_t>> events;
  };

  // Moves freed blocks whose events have all completed to the free lists.
  void process_pending() {
    size_t kept = 0;
    for (void* p : pending_) {
      Block& b = blocks_.at(p);
      bool done = true;
      for (auto& [s, e] : b.events) {
        if (!query_done(cudaEventQuery(e))) {
          done = false;
          break;
        }
      }
      if (!done) {
        pending_[kept++] = p;
        continue;
      }
      for (auto& [s, e] : b.events) (void)cudaEventDestroy(e);
      b.events.clear();
      free_[b.size].push_back(p);
    }
    pending_.resize(kept);
  }

  void release_free_blocks() {
    for (auto& [size, list] : free_) {
      for (void* p : list) {
        cudaError_t err = cudaFreeHost(p);
        if (err != cudaSuccess) std::fprintf(stderr, "kiln: cudaFreeHost failed: %s\n", cudaGetErrorString(err));
        blocks_.erase(p);
      }
      list.clear();
    }
  }

  std::mutex mu_;
  std::unordered_map<void*, Block> blocks_;      // every block, live or cached
  std::map<size_t, std::vector<void*>> free_;     // reusable blocks by size
  std::vector<void*> pending_;                    // freed, waiting for their events
};

PinnedHostAllocator& pinned_cache() {
  static auto* a = new PinnedHostAllocator();
  return *a;
}

int resolve(int device) { return device < 0 ? current_device() : device; }

}  // namespace

Allocator* device_allocator() { return &device_cache(); }
Allocator* pinned_host_allocator() { return &pinned_cache(); }

MemoryStats memory_stats(int device) { return device_cache().cache(resolve(device)).stats(); }

void reset_peak_stats(int device) { device_cache().cache(resolve(device)).reset_peak_stats(); }

void empty_cache() {
  if (device_count() == 0) return;
  for (int d = 0; d < kMaxDevices; ++d)
    if (CachingAllocator* c = device_cache().cache_if_created(d)) c->empty_cache();
  pinned_cache().empty_cache();
}

uint64_t create_graph_pool(int device) { return device_cache().cache(resolve(device)).create_pool(); }
void begin_allocate_to_graph_pool(int device, uint64_t pool, Stream stream) {
  device_cache().cache(resolve(device)).begin_allocate_to_pool(pool, stream);
}
void end_allocate_to_graph_pool(int device, uint64_t pool) {
  device_cache().cache(resolve(device)).end_allocate_to_pool(pool);
}
void release_graph_pool(int device, uint64_t pool) { device_cache().cache(resolve(device)).release_pool(pool); }

void record_stream(const Storage& storage, Stream stream) {
  if (storage.data() == nullptr) return;  // an empty storage
  if (storage.device().is_cuda()) {
    device_cache().cache(storage.device().index).record_stream(storage.data(), stream);
    return;
  }
  KILN_CHECK(storage.is_pinned(), "record_stream: expected a CUDA tensor or a pinned CPU tensor, got memory on ",
             storage.device(), " that is not pinned");
  pinned_cache().record_use(storage.data(), stream);
}

void record_stream(const Tensor& t, Stream stream) {
  check_defined(t, "record_stream");
  record_stream(*t.storage(), stream);
}

}  // namespace kiln::cuda
