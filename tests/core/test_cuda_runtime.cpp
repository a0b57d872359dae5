// CUDA runtime basics on a real GPU: host/device round trips in every dtype, fill, and the errors
// for mixed devices and ops without a CUDA kernel. Skipped (exit 77) without a usable device.
#include "test_util.h"

#include <kiln/core/ops/common.h>

using namespace kiln;

TEST_CASE("host -> device -> host round trip is bitwise, in every dtype") {
  test::require_cuda();
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::u8, DType::b8}) {
    Tensor x = test::random({257, 3}, dt, 5, -100, 100);
    Tensor d = x.to(Device::cuda());
    CHECK(d.device() == Device::cuda());
    Tensor back = d.to(Device::cpu());
    CHECK(test::values(back) == test::values(x));
  }
  // A non-contiguous CPU source and a dtype change on the way in.
  Tensor x = test::random({5, 7}, DType::f32, 6);
  Tensor d = empty({7, 5}, DType::f64, Device::cuda());
  d.copy_(x.t());
  CHECK(test::values(d.to(Device::cpu())) == test::values(x.t().to(DType::f64)));
}

TEST_CASE("fill on the device matches the CPU") {
  test::require_cuda();
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::u8, DType::f64}) {
    Tensor d = full({1000, 3}, 2.75, TensorOptions(dt).device(Device::cuda()));
    CHECK(test::values(d.to(Device::cpu())) == test::values(full({1000, 3}, 2.75, dt)));
  }
}

TEST_CASE("an op on tensors of two devices, or without a CUDA kernel, names the op and the device") {
  test::require_cuda();
  Tensor d = ones({4}, Device::cuda());
  // Whether add has a kernel or not, mixing devices fails and says where the tensors are.
  CHECK_ERROR_CONTAINS(ops::add(ones({4}), d), "add", "cuda:0");
  // The check every op front without a CUDA kernel uses.
  CHECK_ERROR_CONTAINS(ops::check_cpu("some_op", {&d}), "some_op", "cuda:0");
}
