// Memory statistics for any device, as torch.cuda.memory_stats / max_memory_allocated /
// reset_peak_memory_stats give them for CUDA: one struct for the CPU allocator and each CUDA
// device's caching allocator, so a benchmark or a test reads memory the same way on both.
#pragma once

#include <cstdint>

#include <kiln/core/device.h>

namespace kiln {

/// One device's allocator statistics, as memory_stats() returns them.
struct MemoryStats {
  int64_t allocated_bytes = 0;       ///< in blocks held by live tensors (size classes / 512-B rounding)
  int64_t reserved_bytes = 0;        ///< allocated plus cached for reuse (CUDA: every cudaMalloc'd segment)
  int64_t peak_allocated_bytes = 0;  ///< since the start or the last reset_peak_memory_stats
  int64_t num_allocs = 0;            ///< allocations served, from the cache or not
};

/// The statistics of `device`'s allocator (Device::cpu(), or a CUDA device; a CUDA device in a
/// build or on a machine without CUDA is an error naming it).
MemoryStats memory_stats(Device device = Device::cpu());
/// The peak of `device` restarts from its bytes allocated now.
void reset_peak_memory_stats(Device device = Device::cpu());
///@{
/// Shorthands: memory_stats(device).allocated_bytes / .peak_allocated_bytes.
inline int64_t memory_allocated(Device device = Device::cpu()) { return memory_stats(device).allocated_bytes; }
inline int64_t max_memory_allocated(Device device = Device::cpu()) {
  return memory_stats(device).peak_allocated_bytes;
}
///@}

}  // namespace kiln
