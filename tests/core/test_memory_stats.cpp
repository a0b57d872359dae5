// memory_stats / reset_peak_memory_stats on the CPU allocator (torch.cuda.memory_stats' shape),
// and a CUDA device named in a build or on a machine without one is an error.
#include "test_util.h"

#include <kiln/core/memory_stats.h>
#include <kiln/cuda.h>

using namespace kiln;

TEST_CASE("CPU memory statistics follow allocations and the peak resets") {
  const MemoryStats s0 = memory_stats();
  Tensor a = empty({1 << 20}, DType::f32);  // 4 MiB
  const MemoryStats s1 = memory_stats(Device::cpu());
  CHECK(s1.allocated_bytes - s0.allocated_bytes >= int64_t(4) << 20);
  CHECK(s1.num_allocs == s0.num_allocs + 1);
  CHECK(s1.reserved_bytes >= s1.allocated_bytes);
  CHECK(s1.peak_allocated_bytes >= s1.allocated_bytes);
  a = Tensor();
  CHECK(memory_allocated() == s0.allocated_bytes);
  CHECK(max_memory_allocated() >= s1.allocated_bytes);
  reset_peak_memory_stats();
  CHECK(max_memory_allocated() == memory_allocated());
  {
    Tensor b = empty({1 << 18}, DType::f64);  // 2 MiB, freed at once
  }
  CHECK(max_memory_allocated() - memory_allocated() >= int64_t(2) << 20);
}

TEST_CASE("memory_stats of a CUDA device without CUDA names what is missing") {
  if (cuda::is_available()) return;  // the CUDA suites check the device's statistics
  CHECK_THROWS_AS(memory_stats(Device::cuda(0)), Error);
}
