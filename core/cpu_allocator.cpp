// CPU allocator with a bounded cache of large blocks (see cpu_allocator.h).
#include <kiln/core/cpu_allocator.h>

#include <bit>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <kiln/core/error.h>

namespace kiln {

namespace {

constexpr size_t kCacheMinBytes = size_t(1) << 20;

// Blocks under 1 MiB round to 64 bytes; larger ones to 1/8 of their power of two, so a size class
// wastes at most 12.5% and nearby sizes (a last partial batch) share blocks.
size_t size_class(size_t nbytes) {
  if (nbytes < kCacheMinBytes) return (nbytes + 63) / 64 * 64;
  size_t step = std::bit_floor(nbytes) / 8;
  return (nbytes + step - 1) / step * step;
}

size_t default_limit() {
  const char* env = std::getenv("KILN_CPU_CACHE_MB");
  return (env ? std::strtoull(env, nullptr, 10) : 2048ull) << 20;
}

class CachingCpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t bytes = size_class(nbytes);
    if (bytes >= kCacheMinBytes) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.cached_bytes -= bytes;
        ++stats_.cache_hits;
        note_alloc(bytes);
        return p;
      }
      ++stats_.cache_misses;
    }
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) {  // give the cache back and try once more before failing
      cpu_empty_cache();
      p = std::aligned_alloc(64, bytes);
    }
    KILN_CHECK(p != nullptr, "out of CPU memory: failed to allocate ", nbytes, " bytes (", stats().allocated_bytes,
               " bytes in live tensors)");
    std::lock_guard<std::mutex> lock(mu_);
    note_alloc(bytes);
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) noexcept override {
    if (ptr == nullptr) return;
    size_t bytes = size_class(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.allocated_bytes -= bytes;
      if (bytes >= kCacheMinBytes && stats_.cached_bytes + bytes <= limit_) {
        try {
          free_[bytes].push_back(ptr);
          stats_.cached_bytes += bytes;
          return;
        } catch (...) {  // no memory for the free list: release the block instead
        }
      }
    }
    std::free(ptr);
  }

  void empty_cache() {
    std::unordered_map<size_t, std::vector<void*>> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocks.swap(free_);
      stats_.cached_bytes = 0;
    }
    for (auto& [bytes, list] : blocks)
      for (void* p : list) std::free(p);
  }

  void set_limit(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      limit_ = bytes;
    }
    empty_cache();
  }

  CpuAllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
  }

 private:
  void note_alloc(size_t bytes) {
    ++stats_.num_allocs;
    stats_.allocated_bytes += bytes;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  CpuAllocatorStats stats_;
  size_t limit_ = default_limit();
};

CachingCpuAllocator& instance() {
  // Never destroyed: tensors in static storage may be freed after main returns.
  static auto* a = new CachingCpuAllocator();
  return *a;
}

}  // namespace

Allocator* cpu_allocator() { return &instance(); }
CpuAllocatorStats cpu_allocator_stats() { return instance().stats(); }
void cpu_reset_peak_stats() { instance().reset_peak(); }
void cpu_empty_cache() { instance().empty_cache(); }
void set_cpu_cache_limit(size_t bytes) { instance().set_limit(bytes); }

}  // namespace kiln
