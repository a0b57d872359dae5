// The caching allocator's private pools for CUDA graphs (Note [Graph pools]) on the CPU, with the
// fake device: what a capture allocates is the pool's alone, what it frees from outside is held
// until the graph is gone, no event is touched while a capture is under way, and releasing the
// pool hands everything back to the ordinary cache.
#include "test_util.h"

#include <kiln/core/cuda/runtime/caching_allocator.h>

#include "fake_device_memory.h"

using namespace kiln;
using cuda::CachingAllocator;
using cuda::Stream;
using test::FakeDevice;
using test::kMiB;

namespace {

const Stream kCapture(reinterpret_cast<void*>(0x100), 0), kOther(reinterpret_cast<void*>(0x200), 0);

uint64_t pool_of_segment(const CachingAllocator& alloc, void* p) {
  for (const auto& seg : alloc.snapshot())
    if (reinterpret_cast<uintptr_t>(p) >= seg.address && reinterpret_cast<uintptr_t>(p) < seg.address + seg.size)
      return seg.pool;
  FAIL("address not in any segment");
  return ~uint64_t(0);
}

}  // namespace

TEST_CASE("a capture allocates from its pool's own segments, never from the ordinary cache") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  void* warm = alloc.allocate(4096, kCapture);
  alloc.free(warm);  // a free block of the ordinary cache, on the capture stream
  const auto pool = alloc.create_pool();
  CHECK(pool != 0);
  alloc.begin_allocate_to_pool(pool, kCapture);
  CHECK(alloc.capture_underway());
  void* a = alloc.allocate(4096, kCapture);
  CHECK(a != warm);
  CHECK(pool_of_segment(alloc, a) == pool);
  CHECK(dev.malloc_calls == 2);
  void* other = alloc.allocate(4096, kOther);  // another stream, not captured: ordinary cache
  CHECK(pool_of_segment(alloc, other) == 0);
  alloc.end_allocate_to_pool(pool);
  CHECK_FALSE(alloc.capture_underway());

  // After the capture, the pool's free space serves nobody else.
  void* after = alloc.allocate(4096, kCapture);
  CHECK(after == warm);
  void* big = alloc.allocate(kMiB, kCapture);
  CHECK(pool_of_segment(alloc, big) == 0);
  for (void* p : {a, other, after, big}) alloc.free(p);
  alloc.release_pool(pool);
}

TEST_CASE("a pool block freed during the capture is reused by the same capture") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  const auto pool = alloc.create_pool();
  alloc.begin_allocate_to_pool(pool, kCapture);
  void* a = alloc.allocate(8192, kCapture);
  alloc.free(a);
  void* b = alloc.allocate(8192, kCapture);
  CHECK(b == a);
  alloc.free(b);
  alloc.end_allocate_to_pool(pool);
  alloc.release_pool(pool);
}

TEST_CASE("blocks from outside the pool freed during the capture are held until the pool is released") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  void* before = alloc.allocate(4096, kCapture);  // e.g. the previous step's activations
  const auto pool = alloc.create_pool();
  alloc.begin_allocate_to_pool(pool, kCapture);
  alloc.free(before);  // the graph may read it last: its address must stay the graph's
  void* in_capture = alloc.allocate(4096, kCapture);
  CHECK(in_capture != before);
  alloc.free(in_capture);
  alloc.end_allocate_to_pool(pool);

  void* later = alloc.allocate(4096, kCapture);
  CHECK(later != before);  // still held
  alloc.free(later);
  auto snap = alloc.snapshot();
  bool held = false;
  for (const auto& seg : snap)
    for (const auto& blk : seg.blocks)
      if (seg.address + blk.offset == reinterpret_cast<uintptr_t>(before)) held = blk.pending && !blk.allocated;
  CHECK(held);

  alloc.release_pool(pool);
  void* reused = alloc.allocate(4096, kCapture);
  CHECK(reused == before);
  alloc.free(reused);
}

TEST_CASE("no event is recorded or queried during a capture; frees that need events wait for its end") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  const Stream kThird(reinterpret_cast<void*>(0x300), 0);
  void* shared = alloc.allocate(4096, kOther);
  alloc.record_stream(shared, kThird);  // used elsewhere, not by the capture
  void* seen = alloc.allocate(4096, kOther);
  alloc.record_stream(seen, kCapture);  // used on the capturing stream: the graph may use it again
  void* shared2 = alloc.allocate(4096, kOther);
  alloc.record_stream(shared2, kThird);
  alloc.free(shared2);  // an event is pending from before the capture
  CHECK(dev.events_recorded() == 1);

  const auto pool = alloc.create_pool();
  alloc.begin_allocate_to_pool(pool, kCapture);
  dev.forbid_events = true;
  alloc.free(shared);                       // no event now: deferred to the capture's end
  alloc.free(seen);                         // held by the capture's pool
  void* p = alloc.allocate(4096, kOther);   // would query events outside a capture
  alloc.free(p);
  alloc.empty_cache();                      // would wait for events and free segments outside a capture
  dev.forbid_events = false;
  alloc.end_allocate_to_pool(pool);
  CHECK(dev.events_recorded() == 2);        // the deferred free recorded its event at the end
  CHECK(alloc.stats().pending_frees == 2);
  dev.complete_events();
  alloc.empty_cache();
  CHECK(alloc.stats().pending_frees == 0);
  CHECK(dev.segments() == 1);               // `seen` is still held
  alloc.release_pool(pool);                 // now `seen` waits for its use on the capture stream
  CHECK(dev.events_recorded() == 3);
  dev.complete_events();
  alloc.empty_cache();
  CHECK(dev.segments() == 0);
}

TEST_CASE("out of memory during a capture throws at once: no cudaFree to retry with") {
  FakeDevice dev(4 * kMiB);
  CachingAllocator alloc(dev, "cuda:0");
  alloc.free(alloc.allocate(1000, kOther));  // a free 2 MiB segment in the ordinary cache
  const auto pool = alloc.create_pool();
  alloc.begin_allocate_to_pool(pool, kCapture);
  void* a = alloc.allocate(1000, kCapture);  // the pool's 2 MiB segment: the device is full
  CHECK_THROWS_AS(alloc.allocate(3 * kMiB, kCapture), cuda::OutOfMemoryError);
  CHECK(dev.free_calls == 0);
  alloc.free(a);
  alloc.end_allocate_to_pool(pool);
  alloc.release_pool(pool);
  alloc.empty_cache();
  CHECK(dev.free_calls == 2);
}

TEST_CASE("empty_cache keeps a live pool's segments; after release_pool they are given back") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  const auto pool = alloc.create_pool();
  alloc.begin_allocate_to_pool(pool, kCapture);
  void* a = alloc.allocate(3 * kMiB, kCapture);
  void* b = alloc.allocate(1000, kCapture);
  alloc.free(a);
  alloc.free(b);
  alloc.end_allocate_to_pool(pool);
  const int64_t reserved = alloc.stats().reserved_bytes;
  CHECK(reserved == int64_t(20 * kMiB + 2 * kMiB));
  alloc.empty_cache();
  CHECK(alloc.stats().reserved_bytes == reserved);  // the graph replays into these addresses
  alloc.release_pool(pool);
  alloc.empty_cache();
  CHECK(alloc.stats().reserved_bytes == 0);
  CHECK(dev.segments() == 0);
}

TEST_CASE("a graph output still alive when the pool is released returns to the ordinary cache") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  const auto pool = alloc.create_pool();
  alloc.begin_allocate_to_pool(pool, kCapture);
  void* out = alloc.allocate(4096, kCapture);  // e.g. the step's loss, kept by the trainer
  alloc.end_allocate_to_pool(pool);
  alloc.release_pool(pool);
  CHECK(pool_of_segment(alloc, out) == 0);
  alloc.free(out);
  alloc.empty_cache();
  CHECK(alloc.stats().reserved_bytes == 0);
}

TEST_CASE("misuse of pools names the pool and what is wrong") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  CHECK_THROWS_WITH_AS(alloc.begin_allocate_to_pool(7, kCapture), doctest::Contains("no private pool 7"), Error);
  const auto pool = alloc.create_pool();
  const auto second = alloc.create_pool();
  alloc.begin_allocate_to_pool(pool, kCapture);
  CHECK_THROWS_WITH_AS(alloc.begin_allocate_to_pool(pool, kOther), doctest::Contains("already capturing"), Error);
  CHECK_THROWS_WITH_AS(alloc.begin_allocate_to_pool(second, kCapture), doctest::Contains("one capture per stream"),
                       Error);
  CHECK_THROWS_WITH_AS(alloc.release_pool(pool), doctest::Contains("still capturing"), Error);
  alloc.end_allocate_to_pool(pool);
  CHECK_THROWS_WITH_AS(alloc.end_allocate_to_pool(pool), doctest::Contains("is not capturing"), Error);
  alloc.release_pool(pool);
  CHECK_THROWS_WITH_AS(alloc.release_pool(pool), doctest::Contains("no private pool"), Error);
  alloc.release_pool(second);
}
