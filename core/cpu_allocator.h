// The CPU allocator: 64-byte aligned blocks (so vector loops and Eigen see aligned rows). Blocks
// of 1 MiB and more are kept on free and handed out again for the same size class, so a training
// loop stops paying page faults for fresh activation buffers after its first step. The cache is
// bounded (KILN_CPU_CACHE_MB, default 2048) and can be emptied.
#pragma once

#include <cstddef>

#include <kiln/core/storage.h>

namespace kiln {

/// The CPU allocator's statistics (cpu_allocator_stats()).
struct CpuAllocatorStats {
  size_t allocated_bytes = 0;  ///< in live blocks (size classes, not requested bytes)
  size_t peak_allocated_bytes = 0;
  size_t cached_bytes = 0;     ///< in freed blocks kept for reuse
  size_t cache_hits = 0, cache_misses = 0;
  size_t num_allocs = 0;       ///< allocations served (non-empty), from the cache or not
};

///@{
/// The CPU allocator (64-byte aligned, caching blocks of 1 MiB and more) and its statistics.
Allocator* cpu_allocator();
CpuAllocatorStats cpu_allocator_stats();
///@}
void cpu_reset_peak_stats();             ///< the peak restarts from the bytes allocated now
void cpu_empty_cache();                  ///< returns every cached block to the system
void set_cpu_cache_limit(size_t bytes);  ///< 0 disables caching

}  // namespace kiln
