// The offset math of the CUDA index kernels (core/cuda/plan/index_math.h), checked on the CPU against
// offsets computed from multi-indices by hand: every row-major position of a shape maps to the
// element each operand's strides name, with a dim left out, a coordinate picked out, size-1 dims
// dropped. Runs without a GPU.
#include <kiln/core/cuda/plan/index_math.h>

#include "test_util.h"

using namespace kiln;
using namespace kiln::cuda::indexing;

namespace {

int64_t dot(const std::vector<int64_t>& idx, const Strides& s) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * s[d];
  return off;
}

}  // namespace

TEST_CASE("Strided::offsets walks a shape in row-major order under each operand's strides") {
  const Shape shape{3, 1, 4, 5};
  const Strides a = contiguous_strides(shape);
  const Strides b{1, 77, 3, 12};  // a transposed layout
  const Strides c{0, 0, 40, 2};   // broadcast in dim 0
  auto g = make_strided<3>(shape, {a, b, c});
  CHECK(g.nd == 3);  // the size-1 dim is dropped
  int64_t flat = 0;
  test::for_each_index(shape, [&](const std::vector<int64_t>& idx) {
    int64_t off[3];
    g.offsets(flat, off);
    REQUIRE(off[0] == dot(idx, a));
    REQUIRE(off[1] == dot(idx, b));
    REQUIRE(off[2] == dot(idx, c));
    ++flat;
  });
}

TEST_CASE("unit_at gives the coordinate along a dim; zeroed_at leaves the dim to the kernel") {
  const Shape shape{4, 6, 5};
  const Strides x{30, 1, 6};
  for (int64_t dim : {0, 1, 2}) {
    auto g = make_strided<2>(shape, {zeroed_at(x, dim), unit_at(3, dim)});
    int64_t flat = 0;
    test::for_each_index(shape, [&](const std::vector<int64_t>& idx) {
      int64_t off[2];
      g.offsets(flat++, off);
      REQUIRE(off[1] == idx[dim]);
      REQUIRE(off[0] + idx[dim] * x[dim] == dot(idx, x));
    });
  }
  // A size-1 dim along `dim` is dropped: its coordinate is always 0.
  auto g = make_strided<2>(Shape{4, 1, 5}, {zeroed_at({5, 5, 1}, 1), unit_at(3, 1)});
  for (int64_t f = 0; f < 20; ++f) {
    int64_t off[2];
    g.offsets(f, off);
    REQUIRE(off[1] == 0);
    REQUIRE(off[0] == (f / 5) * 5 + f % 5);
  }
}

TEST_CASE("make_strided with a skipped dim walks the fibers along it") {
  // Fibers of a (3, 4, 5) shape along dim 1: 15 of them, in row-major order of (3, 5).
  const Shape shape{3, 4, 5};
  const Strides s = contiguous_strides(shape);
  auto g = make_strided<1>(shape, {s}, 1);
  CHECK(g.nd == 2);
  for (int64_t f = 0; f < 15; ++f) {
    int64_t off[1];
    g.offsets(f, off);
    REQUIRE(off[0] == (f / 5) * 20 + f % 5);
  }
}

TEST_CASE("make_strided refuses more dims than the kernels hold") {
  Shape many(static_cast<size_t>(kMaxDims + 1), 2);
  CHECK_ERROR_CONTAINS(make_strided<1>(many, {contiguous_strides(many)}), "at most", "dims");
  Shape ones(static_cast<size_t>(kMaxDims + 5), 1);
  ones.push_back(3);
  CHECK(make_strided<1>(ones, {contiguous_strides(ones)}).nd == 1);  // size-1 dims do not count
}

TEST_CASE("make_strided: a 0-dim shape, a skipped only dim, and offsets past 2^32") {
  // A scalar index (index_select with a 0-dim index): no dims, every offset 0.
  auto scalar = make_strided<2>(Shape{}, {Strides{}, Strides{}});
  CHECK(scalar.nd == 0);
  int64_t off[2] = {-1, -1};
  scalar.offsets(0, off);
  CHECK(off[0] == 0);
  CHECK(off[1] == 0);
  // scatter_add_ on a 1-D index: skipping its only dim leaves one fiber at offset 0.
  auto fiber = make_strided<1>(Shape{7}, {Strides{3}}, 0);
  CHECK(fiber.nd == 0);
  int64_t f[1] = {-1};
  fiber.offsets(0, f);
  CHECK(f[0] == 0);
  // Offsets stay exact in int64 far beyond 32 bits (a (3, 5, 7) view with huge strides).
  const Shape shape{3, 5, 7};
  const Strides big{int64_t(1) << 34, int64_t(3) << 31, 1000003};
  auto g = make_strided<1>(shape, {big});
  int64_t flat = 0;
  test::for_each_index(shape, [&](const std::vector<int64_t>& idx) {
    int64_t o[1];
    g.offsets(flat++, o);
    REQUIRE(o[0] == dot(idx, big));
  });
}
