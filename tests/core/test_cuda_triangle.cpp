// triu/tril on CUDA against the CPU, bit for bit: every dtype, batched, transposed and sliced
// inputs, diagonals inside and past the matrix, wide rows (several column passes per block),
// single rows/columns and more than 8 batch dims. Skipped (exit 77) without a usable device.
#include "test_util.h"

#include <limits>

using namespace kiln;

TEST_CASE("triu and tril on CUDA match the CPU exactly") {
  test::require_cuda();
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::u8, DType::b8}) {
    Tensor square = test::random({2, 3, 5, 5}, dt, ++seed, 1, 9);  // no zeros: a kept 0 would hide a bug
    Tensor wide = test::random({3, 4, 600}, dt, ++seed, 1, 9);
    Tensor strided = test::random({6, 2, 8}, dt, ++seed, 1, 9).transpose(0, 2).slice(0, 0, 8, 2);  // (4, 2, 6)
    Tensor tall = test::random({37, 1}, dt, ++seed, 1, 9), flat = test::random({1, 37}, dt, ++seed, 1, 9);
    for (const Tensor& x : {square, square.transpose(-1, -2), wide, wide.transpose(0, 1), strided, tall, flat}) {
      Tensor gx = x.to(Device::cuda());
      // The same view of device memory: x's strides over a device copy of its storage.
      Tensor storage = make_tensor(x.storage(), x.dtype(), {int64_t(x.storage()->nbytes() / x.element_size())}, {1})
                           .to(Device::cuda());
      Tensor gview = storage.as_strided(x.shape(), x.strides(), x.offset());
      for (int64_t diag : {std::numeric_limits<int64_t>::min(), int64_t(-700), int64_t(-7), int64_t(-2), int64_t(-1),
                           int64_t(0), int64_t(1), int64_t(3), int64_t(9), int64_t(599),
                           std::numeric_limits<int64_t>::max()}) {
        CAPTURE(diag);
        Tensor up = ops::triu(x, diag), lo = ops::tril(x, diag);
        for (const Tensor& g : {gx, gview}) {
          Tensor gup = ops::triu(g, diag), glo = ops::tril(g, diag);
          CHECK(gup.device().is_cuda());
          CHECK(gup.is_contiguous());
          CHECK(gup.dtype() == dt);
          CHECK(test::values(gup) == test::values(up));
          CHECK(test::values(glo) == test::values(lo));
        }
      }
    }
  }
}

TEST_CASE("triu on CUDA: many rows, more than 8 batch dims, empty tensors, errors") {
  test::require_cuda();
  // Enough rows to use many blocks.
  Tensor big = test::random({3, 700, 513}, DType::f32, 20, 1, 2);
  CHECK(test::values(ops::triu(big.to(Device::cuda()), 1)) == test::values(ops::triu(big, 1)));
  CHECK(test::values(ops::tril(big.to(Device::cuda()).transpose(0, 1), -3)) ==
        test::values(ops::tril(big.transpose(0, 1), -3)));
  // 10 batch dims, permuted so none merge: one launch per outer index until 8 remain.
  Tensor many = test::random(Shape(12, 2), DType::f32, 21, 1, 2);
  Shape perm = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 10, 11};
  Tensor pm = many.permute(perm), gpm = many.to(Device::cuda()).permute(perm);
  CHECK(test::values(ops::triu(gpm)) == test::values(ops::triu(pm)));
  // Empty.
  Tensor empty_x = zeros({0, 4}, Device::cuda());
  CHECK(ops::tril(empty_x).shape() == Shape{0, 4});
  CHECK_ERROR_CONTAINS(ops::triu(zeros({4}, Device::cuda())), "triu", "2 dims", "[4]");
}
