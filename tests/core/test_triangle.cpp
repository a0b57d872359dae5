// triu/tril against a loop reference over batched, strided inputs, several diagonals and dtypes.
#include "test_util.h"

using namespace kiln;

TEST_CASE("triu and tril keep the right triangle, batched and strided") {
  uint64_t seed = 1;
  for (DType dt : test::kDataTypes) {
    Tensor square = test::random({2, 3, 5, 5}, dt, ++seed);
    Tensor wide = test::random({3, 4, 6}, dt, ++seed);
    Tensor strided = test::random({6, 2, 8}, dt, ++seed).transpose(0, 2).slice(0, 0, 8, 2);  // (4, 2, 6)
    for (const Tensor& x : {square, square.transpose(-1, -2), wide, wide.transpose(0, 1), strided}) {
      for (int64_t diag : {-7, -2, -1, 0, 1, 3, 9}) {
        Tensor up = ops::triu(x, diag), lo = ops::tril(x, diag);
        REQUIRE(up.shape() == x.shape());
        REQUIRE(lo.shape() == x.shape());
        CHECK(up.dtype() == dt);
        CHECK(up.is_contiguous());
        std::vector<double> eu, el;
        test::for_each_index(x.shape(), [&](const test::Index& p) {
          int64_t i = p[p.size() - 2], j = p[p.size() - 1];
          eu.push_back(j - i >= diag ? test::at(x, p) : 0.0);
          el.push_back(j - i <= diag ? test::at(x, p) : 0.0);
        });
        CHECK(test::values(up) == eu);
        CHECK(test::values(lo) == el);
      }
    }
  }
}

TEST_CASE("triangle errors") {
  CHECK_ERROR_CONTAINS(ops::triu(zeros({4})), "triu", "2 dims", "[4]");
  CHECK_ERROR_CONTAINS(ops::tril(zeros({})), "tril", "2 dims");
}
