// cuda::Graph on a real GPU: a capture that must allocate fresh device memory (the private pool
// starts empty and the cache was just emptied, so its first allocation reaches cudaMalloc, Note
// [cudaMalloc during a capture]), replays that read the inputs' new values, and a capture after the
// first (the thread's capture mode was restored). Skipped (exit 77) without a usable device.
#include "test_util.h"

#include <kiln/core/cuda/runtime/graph.h>
#include <kiln/cuda.h>
#include <kiln/core/cuda/runtime/stream.h>

using namespace kiln;

namespace {
// y = x * 2 + 1 on `stream`, captured into `graph`; every intermediate and y come from the graph's
// pool. `fresh_bytes` makes one allocation larger than anything the cache could hold.
Tensor capture_affine(cuda::Graph& graph, cuda::Stream stream, const Tensor& x, int64_t fresh_numel) {
  cuda::StreamGuard on(stream);
  graph.capture_begin(stream);
  Tensor big = zeros({fresh_numel}, TensorOptions(DType::f32).device(x.device()));
  Tensor y = x * 2.0 + 1.0 + big.narrow(0, 0, x.numel()).view(x.shape());
  graph.capture_end();
  return y;
}
}  // namespace

TEST_CASE("a capture whose first allocation reaches cudaMalloc succeeds, and its replays read the inputs") {
  test::require_cuda();
  cuda::Stream stream = cuda::Stream::create(0);
  Tensor x = full({64, 32}, 1.5, TensorOptions(DType::f32).device(Device::cuda()));
  stream.synchronize();
  cuda::empty_cache();
  const int64_t mallocs_before = cuda::memory_stats(0).num_device_mallocs;
  cuda::Graph graph;
  Tensor y = capture_affine(graph, stream, x, int64_t(1) << 26);  // 256 MiB: no cached block fits
  CHECK(graph.captured());
  CHECK(cuda::memory_stats(0).num_device_mallocs > mallocs_before);  // the capture did reach cudaMalloc
  graph.replay();
  stream.synchronize();
  CHECK(test::values(y.to(Device::cpu())) == test::values(full({64, 32}, 4.0)));
  {
    cuda::StreamGuard on(stream);
    x.fill_(3.0);
  }
  graph.replay();
  stream.synchronize();
  CHECK(test::values(y.to(Device::cpu())) == test::values(full({64, 32}, 7.0)));

  // The thread left the relaxed mode after the capture's cudaMalloc: a second graph captures too.
  cuda::Graph second;
  Tensor y2 = capture_affine(second, stream, x, int64_t(1) << 25);
  second.replay();
  stream.synchronize();
  CHECK(test::values(y2.to(Device::cpu())) == test::values(full({64, 32}, 7.0)));
}
