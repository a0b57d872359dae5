// The CUDA memory API where no device can be used (built without CUDA, or no GPU): pin_memory,
// record_stream and memory_stats fail with errors that say so, empty_cache does nothing, and
// ordinary tensors are never pinned. Where a device exists, pin_memory works instead.
#include "test_util.h"

using namespace kiln;

TEST_CASE("pinned memory without a device is a clear error; with one it works") {
  Tensor x = ones({3, 4});
  CHECK(!x.is_pinned());
  CHECK(!Tensor().is_pinned());
  if (cuda::is_available()) {
    CHECK(x.pin_memory().is_pinned());
    return;
  }
  CHECK_ERROR_CONTAINS(x.pin_memory(), "pin_memory");
  CHECK_ERROR_CONTAINS(empty({4}, TensorOptions().pinned_memory()), "pin_memory");
  // A non-blocking download needs no device check of its own: CPU -> CPU is a no-op.
  CHECK(x.to(Device::cpu(), /*non_blocking=*/true).is_same(x));
}

TEST_CASE("allocator queries without a device") {
  if (cuda::is_available()) return;
  cuda::empty_cache();  // nothing cached, nothing to do
  CHECK_THROWS_AS(cuda::memory_stats(), Error);
  CHECK_ERROR_CONTAINS(cuda::record_stream(ones({2}), cuda::Stream()), "record_stream");
  CHECK_ERROR_CONTAINS(empty({2}, DType::f32, Device::cuda()), "CUDA");
  CHECK_ERROR_CONTAINS(rand({2}, TensorOptions().device(Device::cuda())), "CUDA");
}
