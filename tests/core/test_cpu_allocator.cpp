// The CPU allocator's cache: large blocks come back for the same size class, the limit holds,
// empty_cache releases, and small blocks are never cached.
#include "test_util.h"

using namespace kiln;

TEST_CASE("a freed large block is reused for the same size class") {
  cpu_empty_cache();
  void* first = nullptr;
  {
    Tensor a = empty({1 << 20});  // 4 MiB
    first = a.data_ptr();
  }
  CpuAllocatorStats s0 = cpu_allocator_stats();
  CHECK(s0.cached_bytes >= (size_t(4) << 20));
  Tensor b = empty({(1 << 20) - 100});  // a little smaller: same size class
  CHECK(b.data_ptr() == first);
  CpuAllocatorStats s1 = cpu_allocator_stats();
  CHECK(s1.cache_hits == s0.cache_hits + 1);
  CHECK(s1.cached_bytes + (size_t(4) << 20) == s0.cached_bytes);
  CHECK(s1.allocated_bytes >= (size_t(4) << 20));
}

TEST_CASE("reused memory holds what is written to it, not stale data") {
  cpu_empty_cache();
  { Tensor a = full({1 << 19}, 3.0); }
  Tensor b = zeros({1 << 19});
  auto v = b.to_vector<float>();
  CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.f; }));
}

TEST_CASE("small blocks are not cached; the limit and empty_cache hold") {
  cpu_empty_cache();
  { Tensor small = empty({100}); }
  CHECK(cpu_allocator_stats().cached_bytes == 0);

  set_cpu_cache_limit(size_t(6) << 20);  // room for one 4 MiB block only
  {
    Tensor a = empty({1 << 20}), b = empty({1 << 20});
  }
  CHECK(cpu_allocator_stats().cached_bytes == (size_t(4) << 20));
  cpu_empty_cache();
  CHECK(cpu_allocator_stats().cached_bytes == 0);
  set_cpu_cache_limit(0);
  { Tensor a = empty({1 << 20}); }
  CHECK(cpu_allocator_stats().cached_bytes == 0);
  set_cpu_cache_limit(size_t(2048) << 20);
}

TEST_CASE("peak tracks the high-water mark") {
  cpu_empty_cache();
  size_t before = cpu_allocator_stats().allocated_bytes;
  {
    Tensor a = empty({1 << 22});  // 16 MiB
    CHECK(cpu_allocator_stats().allocated_bytes >= before + (size_t(16) << 20));
  }
  CHECK(cpu_allocator_stats().peak_allocated_bytes >= before + (size_t(16) << 20));
  CHECK(cpu_allocator_stats().allocated_bytes == before);
}
