// Random numbers and fills made on the GPU against the CPU path: rand, randn, randint,
// uniform_, normal_ and the dropout mask are bitwise equal for equal generator states; arange
// and full match too. Skipped (exit 77) without a device.
#include "test_util.h"

#include <kiln/autograd/ops/dropout.h>
#include <kiln/core/cuda/kernels/random.h>

#include <cstring>

using namespace kiln;

namespace {

const DType kFloating[] = {DType::f32, DType::f64, DType::bf16, DType::f16};
const Shape kShapes[] = {Shape{1}, Shape{7, 13}, Shape{(1 << 20) + 3}};

// Bitwise: the same bytes, not just close values.
void check_bitwise(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  REQUIRE_MESSAGE(gpu.device().is_cuda(), what);
  REQUIRE_MESSAGE(gpu.dtype() == cpu.dtype(), what);
  REQUIRE_MESSAGE(gpu.shape() == cpu.shape(), what);
  Tensor g = gpu.to(Device::cpu()).contiguous(), c = cpu.contiguous();
  const auto* a = static_cast<const unsigned char*>(g.data_ptr());
  const auto* b = static_cast<const unsigned char*>(c.data_ptr());
  const size_t n = g.nbytes(), width = g.element_size();
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) {
      FAIL_CHECK(what, ": element ", i / width, " differs: ", test::values(g)[i / width], " vs CPU ",
                 test::values(c)[i / width]);
      return;
    }
  CHECK(true);
}

}  // namespace

TEST_CASE("rand and randn on CUDA are bitwise the CPU's for the same generator state") {
  test::require_cuda();
  for (DType dt : kFloating)
    for (const Shape& shape : kShapes) {
      const std::string what = std::string(dtype_name(dt)) + " shape " + detail::str_cat(shape);
      Generator gc(1234), gg(1234);
      gc.set_offset(77);
      gg.set_offset(77);
      check_bitwise(rand(shape, gg, TensorOptions(dt).device(Device::cuda())), rand(shape, gc, dt), "rand " + what);
      check_bitwise(randn(shape, gg, TensorOptions(dt).device(Device::cuda())), randn(shape, gc, dt), "randn " + what);
      CHECK(gg.offset() == gc.offset());
      // And the next draw goes on from the same offset.
      check_bitwise(randn(shape, gg, TensorOptions(dt).device(Device::cuda())), randn(shape, gc, dt),
                    "second randn " + what);
    }
}

TEST_CASE("randint on CUDA is bitwise the CPU's") {
  test::require_cuda();
  for (DType dt : {DType::i64, DType::i32, DType::u8, DType::f32, DType::bf16}) {
    const int64_t low = dt == DType::u8 ? 3 : -5;  // u8 cannot hold negatives
    Generator gc(9), gg(9);
    Tensor c = randint(low, 250, {1001, 3}, gc, dt);
    Tensor g = randint(low, 250, {1001, 3}, gg, TensorOptions(dt).device(Device::cuda()));
    check_bitwise(g, c, std::string("randint ") + dtype_name(dt));
  }
}

TEST_CASE("uniform_ and normal_ on CUDA tensors, contiguous or not, match the CPU bitwise") {
  test::require_cuda();
  for (DType dt : kFloating) {
    Generator gc(5), gg(5);
    Tensor c = empty({300, 41}, dt), g = empty({300, 41}, dt, Device::cuda());
    uniform_(c, -0.3, 0.7, gc);
    uniform_(g, -0.3, 0.7, gg);
    check_bitwise(g, c, std::string("uniform_ ") + dtype_name(dt));
    normal_(c, 0.5, 0.02, gc);
    normal_(g, 0.5, 0.02, gg);
    check_bitwise(g, c, std::string("normal_ ") + dtype_name(dt));
    // A transposed view: the draws follow the view's logical order on both sides.
    Tensor ct = empty({41, 300}, dt).t(), gt = empty({41, 300}, dt, Device::cuda()).t();
    normal_(ct, -1.0, 3.0, gc);
    normal_(gt, -1.0, 3.0, gg);
    check_bitwise(gt, ct, std::string("normal_ on a strided view ") + dtype_name(dt));
  }
}

TEST_CASE("the dropout mask made on the device is the CPU's mask") {
  test::require_cuda();
  for (double p : {0.0, 0.1, 0.5, 0.999}) {
    const double scale = 1.0 / (1.0 - p);
    for (DType dt : {DType::f32, DType::f64}) {
      const Shape shape{517, 33};
      Tensor mask = cuda::dropout_mask(shape, dt, p, scale, 42, 1000, Device::cuda());
      Tensor ref = empty(shape, dt);
      for (int64_t i = 0; i < ref.numel(); ++i) {
        double v = philox_uniform(42, 1000 + uint64_t(i)) >= p ? scale : 0.0;
        if (dt == DType::f64)
          ref.data<double>()[i] = v;
        else
          ref.data<float>()[i] = static_cast<float>(v);
      }
      check_bitwise(mask, ref, "dropout mask p = " + std::to_string(p) + " " + dtype_name(dt));
    }
  }
}

TEST_CASE("dropout on CUDA keeps and scales the same elements as on the CPU") {
  test::require_cuda();
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    Tensor x = test::random({64, 129}, dt, 21);
    Generator gc(3), gg(3);
    Tensor c = dropout(x, 0.25, /*training=*/true, gc);
    Tensor g = dropout(x.to(Device::cuda()), 0.25, /*training=*/true, gg);
    check_bitwise(g, c, std::string("dropout ") + dtype_name(dt));
    CHECK(gc.offset() == gg.offset());
  }
}

TEST_CASE("arange, full, zeros and ones on CUDA match the CPU") {
  test::require_cuda();
  for (DType dt : {DType::i64, DType::i32, DType::f32, DType::f64, DType::bf16, DType::f16, DType::u8}) {
    const std::string name = dtype_name(dt);
    TensorOptions on_gpu = TensorOptions(dt).device(Device::cuda());
    const double end = dt == DType::u8 ? 256 : 1000;  // values a u8 holds (past 255 is undefined)
    check_bitwise(arange(end, on_gpu), arange(end, dt), "arange(end) " + name);
    check_bitwise(arange(3, 200, 7, on_gpu), arange(3, 200, 7, dt), "arange(3, 200, 7) " + name);
    if (is_floating(dt))
      check_bitwise(arange(-1.5, 2.0, 0.1, on_gpu), arange(-1.5, 2.0, 0.1, dt), "arange(-1.5, 2, 0.1) " + name);
    check_bitwise(full({5, 77}, 3.25, on_gpu), full({5, 77}, 3.25, dt), "full " + name);
    check_bitwise(zeros({1}, on_gpu), zeros({1}, dt), "zeros " + name);
    check_bitwise(ones({3, 1, 2}, on_gpu), ones({3, 1, 2}, dt), "ones " + name);
  }
  CHECK(arange(0, TensorOptions(DType::i64).device(Device::cuda())).numel() == 0);
  Tensor pos = arange(5.0, TensorOptions(DType::i64).device(Device::cuda()));
  CHECK(pos.device() == Device::cuda());
  CHECK(test::values(pos) == std::vector<double>{0, 1, 2, 3, 4});
}
