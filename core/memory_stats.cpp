// memory_stats for the CPU allocator (cpu_allocator.h) and the CUDA caching allocator (kiln/cuda.h).
#include <kiln/core/memory_stats.h>

#include <kiln/core/cpu_allocator.h>
#include <kiln/core/error.h>
#include <kiln/cuda.h>

namespace kiln {

MemoryStats memory_stats(Device device) {
  if (device.is_cpu()) {
    const CpuAllocatorStats s = cpu_allocator_stats();
    return {int64_t(s.allocated_bytes), int64_t(s.allocated_bytes + s.cached_bytes), int64_t(s.peak_allocated_bytes),
            int64_t(s.num_allocs)};
  }
  KILN_CHECK(device.is_cuda(), "memory_stats: unsupported device ", device);
  const cuda::MemoryStats m = cuda::memory_stats(device.index);
  return {m.allocated_bytes, m.reserved_bytes, m.peak_allocated_bytes, m.num_allocs};
}

void reset_peak_memory_stats(Device device) {
  if (device.is_cpu()) {
    cpu_reset_peak_stats();
    return;
  }
  KILN_CHECK(device.is_cuda(), "reset_peak_memory_stats: unsupported device ", device);
  cuda::reset_peak_stats(device.index);
}

}  // namespace kiln
