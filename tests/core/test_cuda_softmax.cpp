// softmax / log_softmax and their backward kernels on CUDA against the CPU: every floating dtype,
// rows of 1 .. 50257 values (warp- and block-per-row launches, vector and scalar paths), other dims
// (the column kernel), non-contiguous inputs, special values and many rows (grid-stride loops).
// Skipped (exit 77) without a usable device.
#include <limits>

#include "test_util.h"

using namespace kiln;

namespace {

const std::vector<DType> kFloating = {DType::f32, DType::f64, DType::bf16, DType::f16};

// Forward on the device vs the CPU; then each backward fed the CPU's forward output (so the two
// backward passes see the same inputs) and the same random grad_out.
void check_softmax(const Tensor& cpu_x, int64_t dim, bool strided, const std::string& what) {
  const DType dt = cpu_x.dtype();
  const double rtol = test::cuda_rtol(dt);
  for (bool log : {false, true}) {
    const std::string name = what + (log ? " log_softmax" : " softmax") + (strided ? " strided" : "");
    Tensor x = test::to_cuda(cpu_x, strided);
    Tensor y_cpu = log ? ops::log_softmax(cpu_x, dim) : ops::softmax(cpu_x, dim);
    Tensor y = log ? ops::log_softmax(x, dim) : ops::softmax(x, dim);
    test::check_cuda_matches(y, y_cpu, rtol, rtol, name);

    Tensor g_cpu = test::random(cpu_x.shape(), dt, 99, -1, 1);
    Tensor gi_cpu = log ? ops::log_softmax_backward(g_cpu, y_cpu, dim) : ops::softmax_backward(g_cpu, y_cpu, dim);
    Tensor g = test::to_cuda(g_cpu, strided), yd = test::to_cuda(y_cpu, strided);
    Tensor gi = log ? ops::log_softmax_backward(g, yd, dim) : ops::softmax_backward(g, yd, dim);
    test::check_cuda_matches(gi, gi_cpu, rtol, rtol, name + " backward");
  }
}

}  // namespace

TEST_CASE("CUDA softmax over the last dim matches the CPU for every row length and dtype") {
  test::require_cuda();
  for (DType dt : kFloating) {
    // 1, 7: warp rows shorter than a warp; 32, 1000: vectors (multiples of 8); 1025, 4096, 50257:
    // a block per row, scalar and vector.
    for (int64_t n : {1, 7, 32, 1000, 1025, 4096, 50257}) {
      CAPTURE(dt);
      CAPTURE(n);
      const int64_t rows = n > 4096 ? 3 : 37;
      Tensor x = test::random({rows, n}, dt, uint64_t(n), -6, 6);
      check_softmax(x, -1, false, "last dim");
      check_softmax(x, 1, true, "last dim");
    }
  }
}

TEST_CASE("CUDA softmax over other dims (the column kernel) matches the CPU") {
  test::require_cuda();
  for (DType dt : kFloating) {
    CAPTURE(dt);
    Tensor x = test::random({4, 33, 7}, dt, 5, -5, 5);
    for (int64_t dim : {0, 1}) {
      CAPTURE(dim);
      check_softmax(x, dim, false, "dim");
      check_softmax(x, dim, true, "dim");
    }
    check_softmax(test::random({1030, 3}, dt, 6, -5, 5), 0, false, "long column");
  }
}

TEST_CASE("CUDA softmax: special values behave as on the CPU") {
  test::require_cuda();
  const double inf = std::numeric_limits<double>::infinity();
  // Rows: a -inf entry; all -inf; a NaN; a +inf; large values that overflow a naive exp.
  std::vector<double> v = {-inf, 1, 2, 3, -inf, -inf, -inf, -inf, 1, NAN, 2, 3, 1, inf, 2, 3, 1000, 999, -1000, 0};
  for (DType dt : kFloating) {
    CAPTURE(dt);
    Tensor x = from_vector(v, {5, 4}).to(dt);
    for (bool log : {false, true}) {
      Tensor y = log ? ops::log_softmax(x.to(Device::cuda()), 1) : ops::softmax(x.to(Device::cuda()), 1);
      Tensor y_cpu = log ? ops::log_softmax(x, 1) : ops::softmax(x, 1);
      test::check_cuda_matches(y, y_cpu, test::cuda_rtol(dt), test::cuda_rtol(dt), log ? "log_softmax" : "softmax");
      // The same rows along dim 0 take the column kernel.
      Tensor yt = log ? ops::log_softmax(x.t().contiguous().to(Device::cuda()), 0)
                      : ops::softmax(x.t().contiguous().to(Device::cuda()), 0);
      test::check_cuda_matches(yt, y_cpu.t().contiguous(), test::cuda_rtol(dt), test::cuda_rtol(dt), "columns");
    }
  }
}

TEST_CASE("CUDA softmax: more rows than the capped grid, and empty tensors") {
  test::require_cuda();
  // 2.2M rows of one value: more than kMaxGrid * 4 warp rows, so warps loop over rows.
  Tensor x = test::random({2200000, 1}, DType::f32, 7);
  Tensor y = ops::softmax(x.to(Device::cuda()), 1);
  CHECK(test::values(y) == std::vector<double>(2200000, 1.0));
  Tensor x2 = test::random({600000, 3}, DType::f32, 8);
  test::check_cuda_matches(ops::log_softmax(x2.to(Device::cuda()), 1), ops::log_softmax(x2, 1), 1e-5, 1e-5, "many rows");
  Tensor e = empty({0, 5}, DType::f32, Device::cuda());
  CHECK(ops::softmax(e, 1).shape() == Shape{0, 5});
  CHECK(ops::softmax_backward(e, e, 1).shape() == Shape{0, 5});
}

TEST_CASE("CUDA softmax: wrong devices and dtypes are errors") {
  test::require_cuda();
  Tensor x = test::random({2, 3}).to(Device::cuda());
  CHECK_ERROR_CONTAINS(ops::softmax(x.to(DType::i64), 1), "softmax", "i64");
  CHECK_ERROR_CONTAINS(ops::log_softmax(x, 2), "log_softmax", "dim 2");
  CHECK_ERROR_CONTAINS(ops::softmax_backward(x, x.to(Device::cpu()), 1), "softmax_backward", "cuda:0", "cpu");
}
