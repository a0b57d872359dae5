// Storage::resize (torch's UntypedStorage::resize_), which FSDP uses to release a gathered unit and
// refill it (Note [FSDP unit storage]): views keep their shape and see the new bytes, the allocator
// gets the bytes back, and only allocator-owned storages resize.
#include "test_util.h"

#include <kiln/core/cpu_allocator.h>

using namespace kiln;
using kiln::test::values;

TEST_CASE("Storage::resize releases the bytes and refills them under the same views") {
  set_cpu_cache_limit(0);  // live bytes only: a released block is not kept in the cache
  Tensor whole = zeros({1 << 16});
  Tensor view = whole.narrow(0, 8, 4).view({2, 2});
  const size_t before = cpu_allocator_stats().allocated_bytes;
  whole.storage()->resize(0);
  CHECK(whole.storage()->nbytes() == 0);
  CHECK(whole.storage()->data() == nullptr);
  CHECK(view.shape() == Shape{2, 2});  // metadata untouched
  CHECK(cpu_allocator_stats().allocated_bytes + (size_t(1) << 18) <= before);
  whole.storage()->resize(size_t(1) << 18);
  CHECK(whole.storage()->nbytes() == (size_t(1) << 18));
  whole.fill_(3.0);
  CHECK(values(view) == std::vector<double>{3, 3, 3, 3});  // the view reads the new bytes
  CHECK(cpu_allocator_stats().allocated_bytes == before);
  set_cpu_cache_limit(size_t(2048) << 20);
}

TEST_CASE("Storage::resize refuses a wrapped storage") {
  float buffer[4] = {1, 2, 3, 4};
  auto s = Storage::wrap(buffer, sizeof buffer, Device::cpu());
  CHECK_THROWS_WITH_AS(s->resize(0), doctest::Contains("only storages from Storage::allocate"), Error);
  CHECK(s->nbytes() == sizeof buffer);
}
