// The CUDA caching allocator's bookkeeping on the CPU (no GPU needed): a fake device hands out
// addresses that are never touched and events the test completes by hand. Covers rounding and
// segment sizes, reuse, splitting, coalescing, per-stream pools, record_stream's deferred free,
// statistics, empty_cache, the out-of-memory retry and error, and concurrent use.
#include "test_util.h"

#include <kiln/core/cuda/runtime/caching_allocator.h>

#include "fake_device_memory.h"

#include <map>
#include <random>
#include <thread>

using namespace kiln;
using cuda::CachingAllocator;
using cuda::Stream;

namespace {

using test::FakeDevice;
using test::kKiB;
using test::kMiB;

const Stream kA(reinterpret_cast<void*>(0x100), 0), kB(reinterpret_cast<void*>(0x200), 0);

char* as_bytes(void* p) { return static_cast<char*>(p); }

}  // namespace

TEST_CASE("requests round to 512 bytes; segment sizes follow the small/large rules") {
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(512) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::segment_size(512) == 2 * kMiB);
  CHECK(CachingAllocator::segment_size(kMiB) == 2 * kMiB);
  CHECK(CachingAllocator::segment_size(kMiB + 512) == 20 * kMiB);
  CHECK(CachingAllocator::segment_size(10 * kMiB - 512) == 20 * kMiB);
  CHECK(CachingAllocator::segment_size(10 * kMiB) == 10 * kMiB);
  CHECK(CachingAllocator::segment_size(10 * kMiB + 512) == 12 * kMiB);
}

TEST_CASE("small blocks are carved from one 2 MiB segment and reused without new mallocs") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  CHECK(alloc.allocate(0, kA) == nullptr);
  void* p1 = alloc.allocate(1000, kA);
  void* p2 = alloc.allocate(1000, kA);
  CHECK(as_bytes(p2) == as_bytes(p1) + 1024);
  auto s = alloc.stats();
  CHECK(s.reserved_bytes == int64_t(2 * kMiB));
  CHECK(s.allocated_bytes == 2048);
  CHECK(s.num_device_mallocs == 1);
  CHECK(s.num_allocs == 2);

  alloc.free(p1);
  CHECK(alloc.allocate(700, kA) == p1);  // best fit: the freed 1 KiB block, not the big rest

  // Warm-up done: a loop of allocations and frees of many sizes never calls malloc again.
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::vector<void*> live;
    for (int k = 0; k < 8; ++k) live.push_back(alloc.allocate(1 + rng() % (64 * kKiB), kA));
    for (void* p : live) alloc.free(p);
  }
  CHECK(dev.malloc_calls == 1);
  CHECK(alloc.stats().num_device_mallocs == 1);
  CHECK(alloc.stats().allocated_bytes == 2048);
}

TEST_CASE("a small block fills its segment exactly; the next request gets a new segment") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  void* a = alloc.allocate(kMiB, kA);
  void* b = alloc.allocate(kMiB, kA);  // the other half: the rest is 0, nothing to split
  CHECK(as_bytes(b) == as_bytes(a) + kMiB);
  CHECK(dev.malloc_calls == 1);
  void* c = alloc.allocate(1, kA);
  CHECK(dev.malloc_calls == 2);
  auto segs = alloc.snapshot();
  REQUIRE(segs.size() == 2);
  CHECK(segs[0].blocks.size() == 2);
  CHECK(segs[1].blocks.size() == 2);  // 512 B live + the free rest
  CHECK(segs[1].blocks[0].size == 512);
  for (void* p : {a, b, c}) alloc.free(p);
}

TEST_CASE("large blocks split, and freed neighbours coalesce into one block per segment") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  void* a = alloc.allocate(3 * kMiB, kA);  // a 20 MiB segment
  void* b = alloc.allocate(5 * kMiB, kA);
  CHECK(as_bytes(b) == as_bytes(a) + 3 * kMiB);
  void* c = alloc.allocate(11 * kMiB, kA);  // 12 MiB left: 1 MiB over is not worth a split
  CHECK(as_bytes(c) == as_bytes(b) + 5 * kMiB);
  CHECK(dev.malloc_calls == 1);
  CHECK(alloc.stats().allocated_bytes == int64_t(20 * kMiB));

  alloc.free(b);
  auto segs = alloc.snapshot();
  REQUIRE(segs.size() == 1);
  REQUIRE(segs[0].blocks.size() == 3);
  CHECK((segs[0].blocks[1].size == 5 * kMiB && !segs[0].blocks[1].allocated));

  alloc.free(a);  // merges with the free b after it
  segs = alloc.snapshot();
  REQUIRE(segs[0].blocks.size() == 2);
  CHECK(segs[0].blocks[0].size == 8 * kMiB);
  CHECK(!segs[0].blocks[0].allocated);

  // The merged 8 MiB block serves a 7 MiB request from its start.
  void* d = alloc.allocate(7 * kMiB, kA);
  CHECK(d == a);
  alloc.free(d);

  alloc.free(c);  // merges with the free block before it: the whole segment is one block
  segs = alloc.snapshot();
  REQUIRE(segs[0].blocks.size() == 1);
  CHECK(segs[0].blocks[0].size == 20 * kMiB);

  alloc.empty_cache();
  CHECK(dev.free_calls == 1);
  CHECK(dev.segments() == 0);
  CHECK(alloc.stats().reserved_bytes == 0);
  CHECK(alloc.stats().num_device_frees == 1);
}

TEST_CASE("a large request of 10 MiB or more gets its own segment rounded to 2 MiB") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  void* p = alloc.allocate(10 * kMiB + 1, kA);  // 10 MiB + 512 B
  CHECK(alloc.stats().reserved_bytes == int64_t(12 * kMiB));
  CHECK(alloc.stats().allocated_bytes == int64_t(10 * kMiB + 512));  // the rest (> 1 MiB) is split off
  void* q = alloc.allocate(kMiB + kKiB, kA);  // and serves the next large request
  CHECK(as_bytes(q) == as_bytes(p) + 10 * kMiB + 512);
  CHECK(dev.malloc_calls == 1);
  alloc.free(p);
  alloc.free(q);
}

TEST_CASE("freed blocks are reused only by allocations on the same stream") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  void* p = alloc.allocate(4096, kA);
  alloc.free(p);
  void* q = alloc.allocate(4096, kB);
  CHECK(q != p);
  CHECK(dev.malloc_calls == 2);  // B has no cached block: a segment of its own
  void* r = alloc.allocate(4096, kA);
  CHECK(r == p);
  auto segs = alloc.snapshot();
  REQUIRE(segs.size() == 2);
  CHECK(segs[0].stream != segs[1].stream);
  alloc.free(q);
  alloc.free(r);
  // Large blocks too.
  void* big = alloc.allocate(4 * kMiB, kB);
  alloc.free(big);
  void* big_a = alloc.allocate(4 * kMiB, kA);
  CHECK(big_a != big);
  CHECK(alloc.allocate(4 * kMiB, kB) == big);
}

TEST_CASE("record_stream defers reuse until the other stream's work is done") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  void* p = alloc.allocate(4096, kA);
  alloc.record_stream(p, kB);
  alloc.record_stream(p, kB);  // noted once
  alloc.record_stream(p, kA);  // its own stream: nothing to wait for
  alloc.free(p);
  CHECK(dev.events_recorded() == 1);
  CHECK(dev.event_stream(0) == kB);
  CHECK(alloc.stats().pending_frees == 1);
  CHECK(alloc.stats().allocated_bytes == 0);

  void* q = alloc.allocate(4096, kA);  // the event is not done: p stays out of the pool
  CHECK(q != p);
  alloc.free(q);
  auto segs = alloc.snapshot();
  REQUIRE(segs.size() == 1);
  CHECK(segs[0].blocks[0].pending);

  dev.complete_events();
  void* r = alloc.allocate(4096, kA);  // checked at allocation: p is back, merged, best fit
  CHECK(r == p);
  CHECK(alloc.stats().pending_frees == 0);
  CHECK(dev.all_events_destroyed());
  alloc.free(r);
  CHECK(alloc.snapshot()[0].blocks.size() == 1);  // everything coalesced again
  CHECK(dev.malloc_calls == 1);

  // Two other streams: two events, reusable after both.
  FakeDevice dev2;
  CachingAllocator alloc2(dev2, "cuda:1");
  const Stream c(reinterpret_cast<void*>(0x300), 0);
  void* x = alloc2.allocate(100, kA);
  alloc2.record_stream(x, kB);
  alloc2.record_stream(x, c);
  alloc2.free(x);
  CHECK(dev2.events_recorded() == 2);
  CHECK(alloc2.stats().pending_frees == 1);

  CHECK_ERROR_CONTAINS(alloc.record_stream(reinterpret_cast<void*>(0x42), kB), "record_stream", "cuda:0");
}

TEST_CASE("a block whose event cannot be recorded is never reused nor merged into a neighbour") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  void* p = alloc.allocate(4096, kA);
  void* q = alloc.allocate(4096, kA);  // p's neighbour in the same segment
  alloc.record_stream(p, kB);
  dev.fail_events = true;
  CHECK_ERROR_CONTAINS(alloc.free(p), "fake cudaEventRecord failure");
  dev.fail_events = false;
  CHECK_FALSE(alloc.owns(p));
  alloc.free(q);  // q must not coalesce with p, which kB may still be using
  auto segs = alloc.snapshot();
  REQUIRE(segs.size() == 1);
  REQUIRE(segs[0].blocks.size() >= 2);
  CHECK(segs[0].blocks[0].offset == 0);
  CHECK(segs[0].blocks[0].size == 4096);
  CHECK(segs[0].blocks[0].pending);
  for (int i = 0; i < 4; ++i) CHECK(alloc.allocate(4096, kA) != p);  // never handed out again
}

TEST_CASE("empty_cache waits for deferred frees and keeps segments with live blocks") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  void* p = alloc.allocate(4096, kA);
  alloc.record_stream(p, kB);
  alloc.free(p);
  void* live = alloc.allocate(3 * kMiB, kA);
  void* live_small = alloc.allocate(100, kB);
  CHECK(alloc.stats().reserved_bytes == int64_t(24 * kMiB));

  alloc.empty_cache();
  CHECK(dev.synchronized == 1);
  CHECK(dev.free_calls == 1);  // p's segment only
  CHECK(alloc.stats().reserved_bytes == int64_t(22 * kMiB));
  CHECK(alloc.stats().pending_frees == 0);

  alloc.free(live);
  alloc.free(live_small);
  alloc.empty_cache();
  CHECK(alloc.stats().reserved_bytes == 0);
  CHECK(dev.used() == 0);
}

TEST_CASE("statistics: allocated, reserved, peaks and their reset") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  void* a = alloc.allocate(3 * kMiB, kA);
  void* b = alloc.allocate(100, kA);
  auto s = alloc.stats();
  CHECK(s.allocated_bytes == int64_t(3 * kMiB + 512));
  CHECK(s.reserved_bytes == int64_t(22 * kMiB));
  CHECK(s.peak_allocated_bytes == s.allocated_bytes);
  CHECK(s.num_allocs == 2);
  CHECK(s.num_device_mallocs == 2);
  alloc.free(a);
  s = alloc.stats();
  CHECK(s.allocated_bytes == 512);
  CHECK(s.peak_allocated_bytes == int64_t(3 * kMiB + 512));
  CHECK(s.reserved_bytes == int64_t(22 * kMiB));  // cached, not given back
  alloc.reset_peak_stats();
  CHECK(alloc.stats().peak_allocated_bytes == 512);
  CHECK(alloc.stats().peak_reserved_bytes == int64_t(22 * kMiB));
  alloc.empty_cache();
  alloc.reset_peak_stats();
  CHECK(alloc.stats().peak_reserved_bytes == int64_t(2 * kMiB));
  alloc.free(b);
}

TEST_CASE("out of memory: the cache is released and malloc retried once, then a clear error") {
  FakeDevice dev(30 * kMiB);
  CachingAllocator alloc(dev, "cuda:7");
  void* x = alloc.allocate(12 * kMiB, kA);
  alloc.free(x);  // 12 MiB cached
  void* y = alloc.allocate(20 * kMiB, kA);  // 12 + 20 > 30: fails, the cache goes, the retry works
  auto s = alloc.stats();
  CHECK(s.num_alloc_retries == 1);
  CHECK(s.num_device_frees == 1);
  CHECK(s.reserved_bytes == int64_t(20 * kMiB));
  CHECK(s.num_ooms == 0);

  // 20 MiB live, nothing cached: 16 MiB cannot fit.
  bool threw = false;
  try {
    alloc.allocate(16 * kMiB, kA);
  } catch (const cuda::OutOfMemoryError& e) {
    threw = true;
    std::string m = e.what();
    for (const char* part : {"out of memory", "cuda:7", "16.00 MiB", "16777216 bytes", "20971520 bytes) allocated",
                             "reserved", "30.00 MiB total", "10.00 MiB free"})
      CHECK_MESSAGE(m.find(part) != std::string::npos, "\"", m, "\" lacks \"", part, "\"");
  }
  CHECK(threw);
  s = alloc.stats();
  CHECK(s.num_ooms == 1);
  CHECK(s.num_alloc_retries == 2);
  CHECK(s.allocated_bytes == int64_t(20 * kMiB));

  // Absurd sizes fail the same way (a kiln::Error), and the allocator keeps working.
  CHECK_ERROR_CONTAINS(alloc.allocate(size_t(1) << 50, kA), "out of memory", "1125899906842624 bytes");
  alloc.free(y);
  void* z = alloc.allocate(16 * kMiB, kA);
  CHECK(z != nullptr);
  alloc.free(z);
}

TEST_CASE("double frees and foreign pointers are errors; nullptr is ignored") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  alloc.free(nullptr);
  void* p = alloc.allocate(10, kA);
  CHECK(alloc.owns(p));
  alloc.free(p);
  CHECK(!alloc.owns(p));
  CHECK_ERROR_CONTAINS(alloc.free(p), "not a live block", "cuda:0");
  CHECK_ERROR_CONTAINS(alloc.free(reinterpret_cast<void*>(0x1234)), "not a live block");
}

TEST_CASE("concurrent allocations and frees from several threads stay consistent") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&alloc, t] {
      const Stream s(reinterpret_cast<void*>(uintptr_t(0x1000 * (t % 2 + 1))), 0);
      std::mt19937 rng(t);
      std::vector<void*> live;
      for (int i = 0; i < 3000; ++i) {
        if (live.size() < 16 && rng() % 3 != 0) {
          size_t n = rng() % 2 ? 1 + rng() % (256 * kKiB) : 1 + rng() % (12 * kMiB);
          live.push_back(alloc.allocate(n, s));
        } else if (!live.empty()) {
          size_t k = rng() % live.size();
          alloc.free(live[k]);
          live.erase(live.begin() + k);
        }
      }
      for (void* p : live) alloc.free(p);
    });
  }
  for (auto& th : threads) th.join();
  auto s = alloc.stats();
  CHECK(s.allocated_bytes == 0);
  for (const auto& seg : alloc.snapshot()) CHECK(seg.blocks.size() == 1);  // all coalesced
  alloc.empty_cache();
  CHECK(dev.used() == 0);
  CHECK(alloc.stats().reserved_bytes == 0);
}
