// The strided index math of the CUDA copy/fill kernels (core/cuda/plan/offset_calc.h), on the CPU:
// dims merge where operands allow, and every linear index maps to the offsets a hand walk of
// the strides gives, in 32-bit and 64-bit index math.
#include "test_util.h"

#include <kiln/core/cuda/plan/offset_calc.h>

using namespace kiln;
using cuda::OffsetCalc;

namespace {

// Offsets by a plain multi-index walk, for every linear index.
template <int N>
void check_against_walk(const Shape& shape, const std::array<Strides, N>& strides) {
  std::array<const Strides*, N> ptrs;
  for (int k = 0; k < N; ++k) ptrs[k] = &strides[k];
  OffsetCalc<N> calc = cuda::make_offset_calc<N>(shape, ptrs);
  REQUIRE(calc.numel() == shape_numel(shape));
  int64_t linear = 0;
  bool ok = true;
  test::for_each_index(shape, [&](const std::vector<int64_t>& idx) {
    int64_t off64[N];
    uint32_t off32[N];
    calc.template get<int64_t>(linear, off64);
    if (calc.fits_32bit()) calc.template get<uint32_t>(static_cast<uint32_t>(linear), off32);
    for (int k = 0; k < N; ++k) {
      int64_t expect = 0;
      for (size_t d = 0; d < idx.size(); ++d) expect += idx[d] * strides[k][d];
      if (off64[k] != expect || (calc.fits_32bit() && int64_t(off32[k]) != expect)) {
        if (ok) FAIL_CHECK("shape ", shape, " operand ", k, " index ", linear, ": ", off64[k], " vs ", expect);
        ok = false;
      }
    }
    ++linear;
  });
  CHECK(ok);
}

}  // namespace

TEST_CASE("contiguous operands merge into one dim; transposed ones keep two") {
  Shape s{4, 5, 6};
  Strides c = contiguous_strides(s);
  auto calc = cuda::make_offset_calc<2>(s, {&c, &c});
  CHECK(calc.ndim == 1);
  CHECK(calc.sizes[0] == 120);

  Strides t{1, 4, 20};  // the (6, 5, 4) contiguous tensor permuted to (4, 5, 6)
  auto calc2 = cuda::make_offset_calc<2>(s, {&c, &t});
  CHECK(calc2.ndim == 3);

  Shape ones{1, 1, 1};
  Strides z{0, 0, 0};
  auto one = cuda::make_offset_calc<1>(ones, {&z});
  CHECK(one.ndim == 1);
  CHECK(one.numel() == 1);
}

TEST_CASE("offsets match a hand walk for strided, sliced, broadcast and size-1 dims") {
  check_against_walk<2>({3, 7}, {Strides{7, 1}, Strides{1, 3}});             // transpose
  check_against_walk<2>({5, 1, 4}, {Strides{4, 4, 1}, Strides{0, 9, 0}});     // broadcast source
  check_against_walk<2>({2, 3, 4, 5}, {Strides{60, 20, 5, 1}, Strides{1, 2, 6, 24}});
  check_against_walk<2>({6, 10}, {Strides{10, 1}, Strides{40, 2}});          // every other column
  check_against_walk<2>({17}, {Strides{1}, Strides{3}});
  check_against_walk<1>({4, 3, 2}, {Strides{1, 8, 4}});
  check_against_walk<2>({}, {Strides{}, Strides{}});                         // a 0-dim tensor
  check_against_walk<2>({2, 2, 2, 2, 2, 2, 2, 2, 2, 2}, {contiguous_strides(Shape(10, 2)),
                                                         Strides{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}});
}

TEST_CASE("32-bit index math is used only when every offset fits") {
  Shape s{2, 3};
  Strides small{3, 1}, huge{int64_t(1) << 31, 1};
  CHECK(cuda::make_offset_calc<1>(s, {&small}).fits_32bit());
  CHECK(!cuda::make_offset_calc<2>(s, {&small, &huge}).fits_32bit());
  Shape big{int64_t(1) << 31};
  Strides one{1};
  CHECK(!cuda::make_offset_calc<1>(big, {&one}).fits_32bit());
  // The boundary: a last offset of exactly INT32_MAX still fits, one more does not.
  Shape two{2};
  Strides edge{INT32_MAX}, past{int64_t(INT32_MAX) + 1};
  CHECK(cuda::make_offset_calc<1>(two, {&edge}).fits_32bit());
  CHECK(!cuda::make_offset_calc<1>(two, {&past}).fits_32bit());
  // When it does not fit, the int64 path still gives every offset exactly (here past 2^34).
  check_against_walk<2>({3, 5}, {Strides{5, 1}, Strides{int64_t(1) << 34, int64_t(3) << 31}});
  check_against_walk<2>({4, 3}, {Strides{3, 1}, Strides{int64_t(INT32_MAX) + 1, 0}});  // broadcast column
}

TEST_CASE("more than 16 dims that cannot merge is an error naming the limit") {
  Shape s(17, 2);
  Strides st(17, 0);
  for (int d = 0; d < 17; ++d) st[d] = int64_t(3) << d;  // never contiguous across a pair
  CHECK_ERROR_CONTAINS(cuda::make_offset_calc<1>(s, {&st}), "16");
}
