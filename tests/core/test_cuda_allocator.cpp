// The caching device allocator and the pinned host allocator on a real GPU: reuse without
// cudaMalloc after warm-up, statistics, empty_cache, the out-of-memory error, record_stream's
// deferred free, per-device pools, and pinned tensors. Skipped (exit 77) without a device.
#include "test_util.h"

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>

using namespace kiln;

namespace {

constexpr int64_t kMiB = 1 << 20;

cudaPointerAttributes attributes(const void* p) {
  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, p) == cudaSuccess);
  return attr;
}

// One training-step-like round of allocations: small, split-large and own-segment blocks.
void allocation_round() {
  Tensor a = empty({1000}, DType::f32, Device::cuda());
  Tensor b = empty({3 * kMiB}, DType::bf16, Device::cuda());
  Tensor c = empty({16 * kMiB}, DType::f32, Device::cuda());
  Tensor d = full({257}, 1.5, TensorOptions(DType::f32).device(Device::cuda()));
}

}  // namespace

TEST_CASE("after warm-up, a loop of tensor allocations calls cudaMalloc no more") {
  test::require_cuda();
  for (int i = 0; i < 3; ++i) allocation_round();
  cuda::MemoryStats s0 = cuda::memory_stats(0);
  for (int i = 0; i < 200; ++i) allocation_round();
  cuda::MemoryStats s1 = cuda::memory_stats(0);
  CHECK(s1.num_device_mallocs == s0.num_device_mallocs);
  CHECK(s1.num_allocs == s0.num_allocs + 800);
  CHECK(s1.allocated_bytes == s0.allocated_bytes);
  CHECK(s1.reserved_bytes == s0.reserved_bytes);
}

TEST_CASE("statistics follow live tensors; peaks reset") {
  test::require_cuda();
  cuda::MemoryStats s0 = cuda::memory_stats();
  Tensor t = empty({1000}, DType::f32, Device::cuda());  // 4000 B -> a 4096 B block
  cuda::MemoryStats s1 = cuda::memory_stats();
  CHECK(s1.allocated_bytes == s0.allocated_bytes + 4096);
  CHECK(s1.reserved_bytes >= s1.allocated_bytes);
  CHECK(s1.num_allocs == s0.num_allocs + 1);
  {
    Tensor big = empty({64 * kMiB}, DType::u8, Device::cuda());
    CHECK(cuda::memory_stats().peak_allocated_bytes >= s1.allocated_bytes + 64 * kMiB);
  }
  cuda::MemoryStats s2 = cuda::memory_stats();
  CHECK(s2.allocated_bytes == s1.allocated_bytes);
  CHECK(s2.peak_allocated_bytes >= s1.allocated_bytes + 64 * kMiB);
  cuda::reset_peak_stats();
  CHECK(cuda::memory_stats().peak_allocated_bytes == s2.allocated_bytes);
  // The memory really is on the device the tensor says.
  CHECK(attributes(t.data_ptr()).type == cudaMemoryTypeDevice);
  CHECK(attributes(t.data_ptr()).device == 0);
}

TEST_CASE("empty_cache gives unused segments back to the driver") {
  test::require_cuda();
  { Tensor big = empty({96 * kMiB}, DType::u8, Device::cuda()); }
  cuda::MemoryStats s0 = cuda::memory_stats();
  CHECK(s0.reserved_bytes >= s0.allocated_bytes + 96 * kMiB);  // cached after the free
  size_t free_before = 0, free_after = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  cuda::empty_cache();
  REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  cuda::MemoryStats s1 = cuda::memory_stats();
  CHECK(s1.reserved_bytes <= s0.reserved_bytes - 96 * kMiB);
  CHECK(s1.num_device_frees > s0.num_device_frees);
  CHECK(s1.allocated_bytes == s0.allocated_bytes);
  CHECK(free_after >= free_before + size_t(96 * kMiB));
  // Live tensors survive it.
  Tensor keep = full({1000}, 2.0, TensorOptions().device(Device::cuda()));
  cuda::empty_cache();
  CHECK(test::values(keep) == std::vector<double>(1000, 2.0));
}

TEST_CASE("an allocation larger than the device fails with a clear out-of-memory error") {
  test::require_cuda();
  const int64_t pib = int64_t(1) << 50;
  CHECK_ERROR_CONTAINS(empty({pib}, DType::u8, Device::cuda()), "out of memory", "cuda:0", "1125899906842624 bytes",
                       "allocated", "reserved", "total", "free");
  bool typed = false;
  try {
    empty({pib}, DType::u8, Device::cuda());
  } catch (const cuda::OutOfMemoryError&) {
    typed = true;
  }
  CHECK(typed);
  CHECK(cuda::memory_stats().num_ooms >= 2);
  // The failed cudaMalloc left no error behind: allocations and launches still work.
  CHECK(cudaGetLastError() == cudaSuccess);
  Tensor t = full({5000}, 3.0, TensorOptions().device(Device::cuda()));
  CHECK(test::values(t) == std::vector<double>(5000, 3.0));
}

TEST_CASE("record_stream keeps a freed block from reuse until the other stream is done") {
  test::require_cuda();
  cuda::Stream side = cuda::Stream::create(0);
  {  // cache enough blocks first, so nothing below needs a cudaMalloc while `side` is held
    std::vector<Tensor> warm;
    for (int i = 0; i < 6; ++i) warm.push_back(empty({1 << 16}, DType::f32, Device::cuda()));
  }
  // Hold `side` at a host function until the gate opens, so its work is certainly unfinished.
  std::atomic<bool> gate{false};
  auto wait_for_gate = [](void* g) {
    while (!static_cast<std::atomic<bool>*>(g)->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  REQUIRE(cudaLaunchHostFunc(static_cast<cudaStream_t>(side.handle()), wait_for_gate, &gate) == cudaSuccess);

  Tensor t = empty({1 << 16}, DType::f32, Device::cuda());  // on the default stream
  void* p = t.data_ptr();
  cuda::record_stream(t, side);
  const int64_t pending_before = cuda::memory_stats().pending_frees;
  t = Tensor();  // freed while `side` may still use it
  CHECK(cuda::memory_stats().pending_frees == pending_before + 1);
  std::vector<Tensor> again;
  for (int i = 0; i < 4; ++i) again.push_back(empty({1 << 16}, DType::f32, Device::cuda()));
  for (const Tensor& a : again) CHECK(a.data_ptr() != p);

  gate = true;
  side.synchronize();
  again.push_back(empty({1}, DType::f32, Device::cuda()));  // an allocation collects finished frees
  CHECK(cuda::memory_stats().pending_frees == pending_before);

  // Without record_stream the block comes straight back on its own stream.
  Tensor u = empty({1 << 16}, DType::f32, Device::cuda());
  void* q = u.data_ptr();
  u = Tensor();
  Tensor v = empty({1 << 16}, DType::f32, Device::cuda());
  CHECK(v.data_ptr() == q);

  Tensor host = ones({4});
  CHECK_ERROR_CONTAINS(cuda::record_stream(host, side), "record_stream", "pinned");
}

TEST_CASE("a block freed on one stream is not handed to another stream") {
  test::require_cuda();
  cuda::Stream side = cuda::Stream::create(0);
  Tensor t = empty({12345}, DType::f32, Device::cuda());
  void* p = t.data_ptr();
  t = Tensor();
  cuda::StreamGuard guard(side);
  Tensor u = empty({12345}, DType::f32, Device::cuda());
  CHECK(u.data_ptr() != p);
}

TEST_CASE("each device has its own pool") {
  test::require_cuda();
  if (cuda::device_count() < 2) {
    MESSAGE("one device only: the multi-device case is not exercised");
    return;
  }
  cuda::MemoryStats d0 = cuda::memory_stats(0), d1 = cuda::memory_stats(1);
  Tensor t = empty({4096}, DType::f32, Device::cuda(1));  // allocated while device 0 is current
  CHECK(cuda::current_device() == 0);
  CHECK(attributes(t.data_ptr()).device == 1);
  CHECK(cuda::memory_stats(1).allocated_bytes == d1.allocated_bytes + 4096 * 4);
  CHECK(cuda::memory_stats(0).allocated_bytes == d0.allocated_bytes);
  t.fill_(4.0);
  CHECK(test::values(t) == std::vector<double>(4096, 4.0));
  t = Tensor();
  CHECK(cuda::memory_stats(1).allocated_bytes == d1.allocated_bytes);
  cuda::set_device(0);  // the kernel launch made device 1 current
}

TEST_CASE("pinned tensors: pin_memory, empty(pinned_memory), is_pinned") {
  test::require_cuda();
  Tensor x = test::random({33, 17}, DType::f32, 3);
  CHECK(!x.is_pinned());
  Tensor p = x.pin_memory();
  CHECK(p.is_pinned());
  CHECK(p.device().is_cpu());
  CHECK(test::values(p) == test::values(x));
  CHECK(attributes(p.data_ptr()).type == cudaMemoryTypeHost);
  CHECK(p.pin_memory().is_same(p));
  // A strided source becomes a contiguous pinned copy.
  Tensor pt = x.t().pin_memory();
  CHECK(pt.is_contiguous());
  CHECK(test::values(pt) == test::values(x.t()));
  Tensor e = empty({100}, TensorOptions(DType::bf16).pinned_memory());
  CHECK(e.is_pinned());
  Tensor z = zeros({10}, TensorOptions().pinned_memory());
  CHECK(z.is_pinned());
  CHECK(test::values(z) == std::vector<double>(10, 0.0));
  CHECK_ERROR_CONTAINS(empty({4}, TensorOptions().device(Device::cuda()).pinned_memory()), "pinned");
  CHECK_ERROR_CONTAINS(ones({4}, Device::cuda()).pin_memory(), "pin_memory", "cuda:0");
  // Freed pinned blocks come back for the same size class.
  void* first = p.data_ptr();
  p = Tensor();
  Tensor again = empty({33, 17}, TensorOptions().pinned_memory());
  CHECK(again.data_ptr() == first);
}
