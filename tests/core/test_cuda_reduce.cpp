// CUDA reductions against the CPU path: sum/mean/var/std and amax/amin/max/min/argmax/argmin in
// every dtype, over inner, outer, middle, several and all dims, keepdim, strided inputs, short and
// long rows and columns (sizes 1, 3, 1000, 100003 and multi-pass sizes), NaN and ties, and
// bitwise run-to-run stability. Skipped (exit 77) without a usable device.
#include <cmath>
#include <cstring>
#include <limits>

#include "test_util.h"

#include <kiln/cuda.h>

using namespace kiln;

namespace {

using Dims = std::vector<int64_t>;

const DType kFloating[] = {DType::f32, DType::bf16, DType::f16, DType::f64};
const DType kNumeric[] = {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i64, DType::i32, DType::u8};
const std::vector<Dims> kDimSets = {{}, {0}, {1}, {2}, {-1}, {0, 1}, {1, 2}, {0, 2}, {2, 0}, {-3, -2, -1}};

std::string describe(DType dt, const std::string& layout, const Dims& dims, bool keepdim) {
  return std::string(dtype_name(dt)) + " " + layout + " dims " + detail::str_cat(Shape(dims.begin(), dims.end())) +
         (keepdim ? " keepdim" : "");
}

// Uniform in [lo, hi) on the CPU; `integers` rounds down first (floats that sum exactly).
Tensor values_in(const Shape& shape, DType dt, uint64_t seed, double lo, double hi, bool integers) {
  return integers ? test::random(shape, DType::i64, seed, lo, hi).to(dt) : test::random(shape, dt, seed, lo, hi);
}

// (4, 6, 5) tensors on the device as contiguous, transposed, permuted, stepped-slice and expanded
// views (the views are made on the device, so the kernels see the strides).
std::vector<std::pair<std::string, Tensor>> device_layouts(DType dt, uint64_t seed, double lo, double hi,
                                                           bool integers = false) {
  auto make = [&](const Shape& shape, uint64_t k) { return values_in(shape, dt, seed + k, lo, hi, integers).to(Device::cuda()); };
  return {{"contiguous", make({4, 6, 5}, 0)},
          {"transposed", make({5, 6, 4}, 1).transpose(0, 2)},
          {"permuted", make({6, 5, 4}, 2).permute({2, 0, 1})},
          {"stepped slice", make({5, 6, 8}, 3).transpose(0, 2).slice(0, 1, 8, 2)},
          {"expanded", make({1, 6, 5}, 4).expand({4, 6, 5})}};
}

// Per-element |gpu - cpu| <= rtol * (|cpu| + magnitude) (NaN matches NaN): the GPU accumulates
// floats in float and the CPU in double, so sums may differ by a few ulps of the summed magnitudes.
void check_close_to(const Tensor& gpu, const Tensor& cpu, const Tensor& magnitude, double rtol,
                    const std::string& what) {
  REQUIRE_MESSAGE(gpu.device().is_cuda(), what, ": result on ", gpu.device().str());
  REQUIRE_MESSAGE(gpu.shape() == cpu.shape(), what, ": shape ", gpu.shape(), " vs CPU ", cpu.shape());
  CHECK_MESSAGE(gpu.dtype() == cpu.dtype(), what, ": dtype ", dtype_name(gpu.dtype()));
  auto g = test::values(gpu), c = test::values(cpu);
  std::vector<double> m = magnitude.defined() ? test::values(magnitude) : std::vector<double>(c.size(), 0.0);
  for (size_t k = 0; k < c.size(); ++k) {
    const bool ok = (std::isnan(g[k]) && std::isnan(c[k])) || g[k] == c[k] ||
                    std::fabs(g[k] - c[k]) <= rtol * (std::fabs(c[k]) + m[k]);
    if (!ok) {
      FAIL_CHECK(what, ": element ", k, " is ", g[k], ", CPU ", c[k], " (rtol ", rtol, ", magnitude ", m[k], ")");
      return;
    }
  }
}

// Tolerance of a float-accumulated sum relative to the summed magnitudes (a tree of ~40 levels).
double sum_rtol(DType dt) {
  switch (dt) {
    case DType::f32: return 4e-6;
    case DType::f64: return 1e-12;
    default: return test::cuda_rtol(dt);
  }
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  Tensor x = a.to(Device::cpu()).contiguous(), y = b.to(Device::cpu()).contiguous();
  return x.shape() == y.shape() && x.dtype() == y.dtype() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

}  // namespace

TEST_CASE("sum of integer-valued floats is exact on the GPU for every dim set, layout and keepdim") {
  test::require_cuda();
  // Small integers: every partial sum is exact in float, so the GPU must equal the CPU exactly;
  // a value read twice or skipped cannot hide in a tolerance.
  for (DType dt : kFloating) {
    for (auto& [layout, x] : device_layouts(dt, 3, -8.0, 8.0, /*integers=*/true)) {
      Tensor xc = x.to(Device::cpu());
      for (const Dims& dims : kDimSets)
        for (bool keepdim : {false, true}) {
          const std::string what = describe(dt, layout, dims, keepdim);
          CAPTURE(what);
          test::check_cuda_matches(ops::sum(x, dims, keepdim), ops::sum(xc, dims, keepdim), 0, 0, what + " sum");
        }
    }
  }
}

TEST_CASE("sum, mean, var, std match the CPU for every dtype, dim set, layout and keepdim") {
  test::require_cuda();
  for (DType dt : kFloating) {
    const double rtol = test::cuda_rtol(dt);
    for (auto& [layout, x] : device_layouts(dt, 7, -2.0, 2.0)) {
      Tensor xc = x.to(Device::cpu());
      Tensor mag = ops::abs(xc.to(DType::f64));
      for (const Dims& dims : kDimSets)
        for (bool keepdim : {false, true}) {
          const std::string what = describe(dt, layout, dims, keepdim);
          CAPTURE(what);
          check_close_to(ops::sum(x, dims, keepdim), ops::sum(xc, dims, keepdim), ops::sum(mag, dims, keepdim),
                         sum_rtol(dt), what + " sum");
          check_close_to(ops::mean(x, dims, keepdim), ops::mean(xc, dims, keepdim), ops::mean(mag, dims, keepdim),
                         sum_rtol(dt), what + " mean");
          for (int64_t correction : {0, 1}) {
            check_close_to(ops::var(x, dims, correction, keepdim), ops::var(xc, dims, correction, keepdim), Tensor(),
                           rtol, what + " var");
            check_close_to(ops::std(x, dims, correction, keepdim), ops::std(xc, dims, correction, keepdim), Tensor(),
                           rtol, what + " std");
          }
        }
    }
  }
}

TEST_CASE("short and long rows and columns, one to three passes, match the CPU") {
  test::require_cuda();
  struct Case {
    Shape shape;
    Dims dims;
  };
  // Rows: n <= 1024 (lane groups), n > 1024 (blocks), n > 8192 (partials), n > 8192 * 1024 (three
  // passes). Columns: narrow and wide, short and long (partials of partials for 4.5M x 3).
  const std::vector<Case> cases = {
      {{1}, {}},          {{3}, {}},           {{1000}, {}},        {{100003}, {}},       {{1, 1}, {1}},
      {{3, 1000}, {1}},   {{3, 1025}, {-1}},   {{2, 8192}, {1}},    {{3, 100003}, {1}},   {{1000, 3}, {1}},
      {{1000, 3}, {0}},   {{100003, 3}, {0}},  {{100003, 1}, {0}},  {{3, 100003}, {0}},   {{1000, 1000}, {0}},
      {{1000, 1000}, {1}}, {{2, 100003, 2}, {1}}, {{7, 33, 9}, {1}}, {{5, 3, 700}, {0, 2}}, {{9000000}, {}},
      {{4500000, 3}, {0}}, {{257, 768}, {0}}};
  for (const Case& c : cases) {
    for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
      if (shape_numel(c.shape) > 1000000 && dt != DType::f32) continue;  // the large ones once
      const std::string what = std::string(dtype_name(dt)) + " " + detail::str_cat(c.shape) + " dims " +
                               detail::str_cat(Shape(c.dims.begin(), c.dims.end()));
      CAPTURE(what);
      Tensor xi = values_in(c.shape, dt, 11, -8.0, 8.0, /*integers=*/true);  // exact sums
      Tensor gi = xi.to(Device::cuda());
      test::check_cuda_matches(ops::sum(gi, c.dims), ops::sum(xi, c.dims), 0, 0, what + " exact sum");
      test::check_cuda_matches(ops::amax(gi, c.dims), ops::amax(xi, c.dims), 0, 0, what + " amax (ties)");
      test::check_cuda_matches(ops::amin(gi, c.dims), ops::amin(xi, c.dims), 0, 0, what + " amin (ties)");
      if (c.dims.size() == 1) {
        auto gm = ops::max(gi, c.dims[0]), cm = ops::max(xi, c.dims[0]);
        test::check_cuda_matches(gm.indices, cm.indices, 0, 0, what + " max indices (first of ties)");
        test::check_cuda_matches(ops::argmin(gi, c.dims[0]), ops::argmin(xi, c.dims[0]), 0, 0, what + " argmin");
      }
      Tensor x = test::random(c.shape, dt, 12);
      Tensor g = x.to(Device::cuda());
      Tensor mag = ops::abs(x.to(DType::f64));
      check_close_to(ops::sum(g, c.dims), ops::sum(x, c.dims), ops::sum(mag, c.dims), sum_rtol(dt), what + " sum");
      check_close_to(ops::mean(g, c.dims), ops::mean(x, c.dims), ops::mean(mag, c.dims), sum_rtol(dt), what + " mean");
      check_close_to(ops::var(g, c.dims), ops::var(x, c.dims), Tensor(), test::cuda_rtol(dt), what + " var");
      check_close_to(ops::std(g, c.dims, 0), ops::std(x, c.dims, 0), Tensor(), test::cuda_rtol(dt), what + " std");
    }
  }
}

// Note [Vector columns]: the vector column form (16 bytes of adjacent columns per thread) against
// the CPU on every shape the scalar form is tested on above plus column shapes it takes (widths
// that are and are not multiples of the vector, an unaligned slice, the GPT bias gradients), and
// bitwise against the scalar form where both put 32 threads across the columns.
TEST_CASE("vector column reductions match the CPU, and the scalar form bitwise where they share a plan") {
  test::require_cuda();
  struct Restore {
    bool before = cuda::vector_column_reductions();
    ~Restore() { cuda::set_vector_column_reductions(before); }
  } restore;
  struct Case {
    Shape shape;
    Dims dims;
    bool same_plan;  // inner >= 32 * vector: the two forms sum each column in one order
  };
  const std::vector<Case> cases = {
      {{1000, 8}, {0}, false},      {{1000, 24}, {0}, false},      {{300, 768}, {0}, true},
      {{16384, 768}, {0}, true},    {{4096, 2304}, {0}, true},     {{2048, 3072}, {0}, true},
      {{100003, 16}, {0}, false},   {{7, 33, 256}, {1}, true},     {{5, 3, 700}, {0}, false},
      {{3, 4500, 512}, {1}, true},  {{129, 1000}, {0}, true}};
  for (const Case& c : cases)
    for (DType dt : {DType::bf16, DType::f16, DType::f32, DType::f64}) {
      const std::string what = std::string(dtype_name(dt)) + " " + detail::str_cat(c.shape) + " dims " +
                               detail::str_cat(Shape(c.dims.begin(), c.dims.end()));
      CAPTURE(what);
      Tensor x = test::random(c.shape, dt, 31);
      Tensor g = x.to(Device::cuda());
      Tensor mag = ops::abs(x.to(DType::f64));
      cuda::set_vector_column_reductions(false);
      const Tensor scalar_sum = ops::sum(g, c.dims), scalar_max = ops::amax(g, c.dims);
      check_close_to(scalar_sum, ops::sum(x, c.dims), ops::sum(mag, c.dims), sum_rtol(dt), what + " scalar sum");
      cuda::set_vector_column_reductions(true);
      const Tensor vector_sum = ops::sum(g, c.dims);
      check_close_to(vector_sum, ops::sum(x, c.dims), ops::sum(mag, c.dims), sum_rtol(dt), what + " sum");
      check_close_to(ops::mean(g, c.dims), ops::mean(x, c.dims), ops::mean(mag, c.dims), sum_rtol(dt), what + " mean");
      check_close_to(ops::var(g, c.dims), ops::var(x, c.dims), Tensor(), test::cuda_rtol(dt), what + " var");
      test::check_cuda_matches(ops::amax(g, c.dims), ops::amax(x, c.dims), 0, 0, what + " amax");
      auto gm = ops::max(g, c.dims[0]), cm = ops::max(x, c.dims[0]);
      test::check_cuda_matches(gm.indices, cm.indices, 0, 0, what + " max indices");
      CHECK(bitwise_equal(ops::amax(g, c.dims), scalar_max));
      // f32 is 4-wide and f64 2-wide: the same plan needs inner >= 128 / 64, met where 16-bit's is.
      if (c.same_plan) CHECK_MESSAGE(bitwise_equal(vector_sum, scalar_sum), what, ": vector and scalar sums differ");
      CHECK(bitwise_equal(ops::sum(g, c.dims), vector_sum));  // run to run
      // Dense data one element past an aligned start: inner is a multiple of the vector but the
      // pointer is not aligned to it, so the scalar form runs; still right.
      if (c.shape.size() == 2) {
        const int64_t rows = c.shape[0], cols = c.shape[1];
        Tensor buf = test::random({rows * cols + 1}, dt, 32);
        Tensor xs = buf.narrow(0, 1, rows * cols).view({rows, cols});
        Tensor gs = buf.to(Device::cuda()).narrow(0, 1, rows * cols).view({rows, cols});
        check_close_to(ops::sum(gs, {0}), ops::sum(xs, {0}), ops::sum(ops::abs(xs.to(DType::f64)), {0}), sum_rtol(dt),
                       what + " sum from an unaligned start");
      }
    }
}

TEST_CASE("amax, amin, max, min, argmax, argmin match the CPU exactly, ties included") {
  test::require_cuda();
  for (DType dt : kNumeric) {
    const double lo = dt == DType::u8 ? 0.0 : -3.0;
    // Values in a range of 6: many ties, so "the first position" is exercised everywhere.
    for (auto& [layout, x] : device_layouts(dt, 21, lo, lo + 6.0, /*integers=*/true)) {
      Tensor xc = x.to(Device::cpu());
      for (const Dims& dims : kDimSets) {
        for (bool keepdim : {false, true}) {
          const std::string what = describe(dt, layout, dims, keepdim);
          CAPTURE(what);
          test::check_cuda_matches(ops::amax(x, dims, keepdim), ops::amax(xc, dims, keepdim), 0, 0, what + " amax");
          test::check_cuda_matches(ops::amin(x, dims, keepdim), ops::amin(xc, dims, keepdim), 0, 0, what + " amin");
        }
      }
      for (int64_t dim : {0, 1, 2, -1}) {
        for (bool keepdim : {false, true}) {
          const std::string what = describe(dt, layout, {dim}, keepdim);
          CAPTURE(what);
          auto gmax = ops::max(x, dim, keepdim), cmax = ops::max(xc, dim, keepdim);
          auto gmin = ops::min(x, dim, keepdim), cmin = ops::min(xc, dim, keepdim);
          test::check_cuda_matches(gmax.values, cmax.values, 0, 0, what + " max values");
          test::check_cuda_matches(gmax.indices, cmax.indices, 0, 0, what + " max indices");
          test::check_cuda_matches(gmin.values, cmin.values, 0, 0, what + " min values");
          test::check_cuda_matches(gmin.indices, cmin.indices, 0, 0, what + " min indices");
          test::check_cuda_matches(ops::argmax(x, dim, keepdim), ops::argmax(xc, dim, keepdim), 0, 0, what + " argmax");
          test::check_cuda_matches(ops::argmin(x, dim, keepdim), ops::argmin(xc, dim, keepdim), 0, 0, what + " argmin");
        }
      }
    }
  }
}

TEST_CASE("NaN wins in max, min, amax, amin: the first NaN's position, in rows and columns, short and long") {
  test::require_cuda();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType dt : kFloating) {
    for (Shape shape : {Shape{3, 5}, Shape{4, 3000}, Shape{2, 100003}, Shape{100003, 2}}) {
      Tensor f = test::random(shape, DType::f32, 31);
      float* p = f.data<float>();
      const int64_t n = f.numel();
      // Several NaNs in row 0 / column 0 (so "the first" matters), one late NaN elsewhere.
      for (int64_t k : {int64_t(2) * shape[1], int64_t(1), n - 1, int64_t(4) * shape[1] + 1}) {
        if (k < n) p[k] = nan;
      }
      if (shape[0] > 2) p[n / 2] = nan;
      Tensor x = f.to(dt);
      Tensor g = x.to(Device::cuda());
      for (int64_t dim : {0, 1}) {
        const std::string what = std::string(dtype_name(dt)) + " " + detail::str_cat(shape) + " dim " + std::to_string(dim);
        CAPTURE(what);
        auto gm = ops::max(g, dim), cm = ops::max(x, dim);
        test::check_cuda_matches(gm.values, cm.values, 0, 0, what + " max values");
        test::check_cuda_matches(gm.indices, cm.indices, 0, 0, what + " max indices");
        auto gn = ops::min(g, dim), cn = ops::min(x, dim);
        test::check_cuda_matches(gn.values, cn.values, 0, 0, what + " min values");
        test::check_cuda_matches(gn.indices, cn.indices, 0, 0, what + " min indices");
        test::check_cuda_matches(ops::amax(g, {dim}), ops::amax(x, {dim}), 0, 0, what + " amax");
        test::check_cuda_matches(ops::amin(g, {dim}), ops::amin(x, {dim}), 0, 0, what + " amin");
      }
      CHECK(std::isnan(ops::amax(g, {}).item()));
      CHECK(std::isnan(ops::sum(g).item()));
    }
  }
  // The first NaN, not the first max, not a later NaN: a hand-checked row.
  Tensor x = from_vector<float>({1, 9, nan, 9, nan, 2}, {1, 6}).to(Device::cuda());
  CHECK(ops::argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{2});
  CHECK(ops::argmin(x, 1).to_vector<int64_t>() == std::vector<int64_t>{2});
  Tensor y = from_vector<float>({1, 9, 3, 9, 0, 0}, {1, 6}).to(Device::cuda());
  CHECK(ops::argmax(y, 1).to_vector<int64_t>() == std::vector<int64_t>{1});
  CHECK(ops::argmin(y, 1).to_vector<int64_t>() == std::vector<int64_t>{4});
}

TEST_CASE("integer and bool sums give exact i64 on the GPU") {
  test::require_cuda();
  for (DType dt : {DType::i64, DType::i32, DType::u8}) {
    const double lo = dt == DType::u8 ? 0.0 : -1000.0;
    for (Shape shape : {Shape{7, 9}, Shape{3, 100003}, Shape{100003, 3}, Shape{1}}) {
      Tensor x = test::random(shape, dt, 41, lo, 1000.0);
      Tensor g = test::to_cuda(x, /*strided=*/true);
      for (const Dims& dims : std::vector<Dims>{{}, {0}, {-1}}) {
        const std::string what = std::string(dtype_name(dt)) + " " + detail::str_cat(shape);
        CAPTURE(what);
        Tensor s = ops::sum(g, dims);
        CHECK(s.dtype() == DType::i64);
        test::check_cuda_matches(s, ops::sum(x, dims), 0, 0, what);
      }
    }
  }
  // i64 sums beyond 2^53 stay exact (no float on the way).
  Tensor big = full({5}, double(int64_t(1) << 60), DType::i64);
  CHECK(ops::sum(big.to(Device::cuda())).to_vector<int64_t>() == ops::sum(big).to_vector<int64_t>());
  Tensor b = ops::gt(test::random({300, 70}, DType::f32, 3), 0.0);
  Tensor bg = b.to(Device::cuda());
  for (const Dims& dims : std::vector<Dims>{{}, {0}, {1}})
    test::check_cuda_matches(ops::sum(bg, dims), ops::sum(b, dims), 0, 0, "bool");
}

TEST_CASE("results are bitwise the same on every run") {
  test::require_cuda();
  struct Case {
    Shape shape;
    Dims dims;
  };
  for (const Case& c : {Case{{100003}, {}}, Case{{3, 100003}, {1}}, Case{{100003, 5}, {0}}, Case{{64, 4096}, {0}},
                        Case{{2000000}, {}}}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      CAPTURE(c.shape);
      Tensor g = test::random(c.shape, dt, 51).to(Device::cuda());
      CHECK(bitwise_equal(ops::sum(g, c.dims), ops::sum(g, c.dims)));
      CHECK(bitwise_equal(ops::mean(g, c.dims), ops::mean(g, c.dims)));
      CHECK(bitwise_equal(ops::var(g, c.dims), ops::var(g, c.dims)));
    }
  }
}

TEST_CASE("scalars, empty dims and errors on the GPU") {
  test::require_cuda();
  Tensor s = scalar_tensor(3.5).to(Device::cuda());
  CHECK(ops::sum(s).item() == 3.5);
  CHECK(ops::sum(s, {0}).shape() == Shape{});
  CHECK(ops::amax(s, {-1}).item() == 3.5);
  CHECK(ops::argmax(s, 0).item() == ops::argmax(scalar_tensor(3.5), 0).item());
  Tensor e = zeros({3, 0}).to(Device::cuda());
  test::check_cuda_matches(ops::sum(e, {1}), ops::sum(zeros({3, 0}), {1}), 0, 0, "sum over an empty dim");
  CHECK(ops::sum(e, {0}).shape() == Shape{0});
  CHECK(std::isnan(ops::mean(e, {1}).to_vector<float>()[0]));
  CHECK(std::isnan(ops::var(e, {1}).to_vector<float>()[0]));
  CHECK_ERROR_CONTAINS(ops::amax(e, {1}), "amax", "empty", "[3, 0]");
  Tensor xc = test::random({2, 3, 4});
  Tensor x = xc.to(Device::cuda());
  CHECK_ERROR_CONTAINS(ops::sum(x, {3}), "sum", "dim 3");
  CHECK_ERROR_CONTAINS(ops::mean(xc.to(DType::i64).to(Device::cuda())), "mean", "i64");
  CHECK_ERROR_CONTAINS(ops::var(xc.to(DType::i32).to(Device::cuda()), {0}), "var", "i32");
  CHECK_ERROR_CONTAINS(ops::max(ops::gt(xc, 0.0).to(Device::cuda()), 0), "max", "bool");
  // var with n <= correction gives inf or NaN, as on the CPU.
  Tensor one = test::random({4, 1}).to(Device::cuda());
  test::check_cuda_matches(ops::var(one, {1}), ops::var(one.to(Device::cpu()), {1}), 0, 0, "var of one value");
}
