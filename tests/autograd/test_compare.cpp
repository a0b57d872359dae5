// isclose / allclose / equal against torch 1.13's answers for the same inputs: infinities, NaN
// (with and without equal_nan), broadcasting, integer inputs, empty tensors and the argument errors.
#include <limits>

#include "test_util.h"

using namespace kiln;

namespace {
const double kInf = std::numeric_limits<double>::infinity(), kNan = std::numeric_limits<double>::quiet_NaN();

std::vector<bool> bools(const Tensor& t) {
  REQUIRE(t.dtype() == DType::b8);
  std::vector<bool> out;
  for (double v : test::values(t)) out.push_back(v != 0);
  return out;
}
}  // namespace

TEST_CASE("isclose: torch's answers on infinities, NaN and tiny values") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(dt));
    // torch.isclose([1, inf, inf, nan, 1e-9], [inf, inf, -inf, nan, 0]) = [F, T, F, F, T]
    Tensor a = from_vector<double>({1, kInf, kInf, kNan, 1e-9}, {5}).to(dt);
    Tensor b = from_vector<double>({kInf, kInf, -kInf, kNan, 0}, {5}).to(dt);
    CHECK(bools(isclose(a, b)) == std::vector<bool>{false, true, false, false, true});
    CHECK(bools(isclose(a, b, 1e-5, 1e-8, /*equal_nan=*/true)) == std::vector<bool>{false, true, false, true, true});
  }
  // |a - b| <= atol + rtol |b|: the tolerance is relative to b, as torch.
  Tensor a = from_vector<double>({1.0, 100.0, 100.0}, {3}), b = from_vector<double>({1.1, 101.0, 110.0}, {3});
  CHECK(bools(isclose(a, b, 0.01, 0.0)) == std::vector<bool>{false, true, false});
  CHECK(bools(isclose(a, b, 0.0, 0.1 + 1e-12)) == std::vector<bool>{true, false, false});
  // torch.isclose(tensor([1]), tensor([2]), atol=1.5) = [True]: integers compare with tolerances too.
  CHECK(bools(isclose(from_vector<int64_t>({1}, {1}), from_vector<int64_t>({2}, {1}), 0, 1.5)) ==
        std::vector<bool>{true});
}

TEST_CASE("allclose: broadcasting, empty tensors, and the errors torch raises") {
  CHECK(allclose(from_vector<float>({1, 2}, {2}), from_vector<float>({1, 2.00001f}, {2})));
  CHECK_FALSE(allclose(from_vector<float>({1, 2}, {2}), from_vector<float>({1}, {1})));  // torch: False
  CHECK(allclose(full({2, 3}, 0.5), full({3}, 0.5)));                                     // broadcast
  CHECK(allclose(zeros({0}), zeros({0})));                                                // torch: True
  CHECK_FALSE(allclose(from_vector<double>({kNan}, {1}), from_vector<double>({kNan}, {1})));
  CHECK(allclose(from_vector<double>({kNan}, {1}), from_vector<double>({kNan}, {1}), 1e-5, 1e-8, true));
  // torch: "Long did not match Float"; "rtol must be greater than or equal to zero".
  CHECK_THROWS_AS(allclose(from_vector<int64_t>({1}, {1}), from_vector<float>({1}, {1})), ValueError);
  CHECK_THROWS_AS(allclose(zeros({1}), zeros({1}), -1.0), ValueError);
  CHECK_THROWS_AS(allclose(zeros({2}), zeros({3})), ValueError);  // shapes that do not broadcast
  CHECK_THROWS_AS(allclose(Tensor(), zeros({1})), ValueError);
}

TEST_CASE("equal: same shape and values after promotion; NaN equals nothing") {
  CHECK(equal(from_vector<int64_t>({1}, {1}), from_vector<float>({1}, {1})));  // torch: True
  CHECK_FALSE(equal(from_vector<float>({1, 2}, {2}), from_vector<float>({1}, {1})));  // no broadcasting
  CHECK_FALSE(equal(zeros({2, 3}), zeros({3, 2})));
  CHECK(equal(arange(6).view({2, 3}), arange(6).view({2, 3})));
  CHECK(equal(arange(6).view({2, 3}).t(), arange(6).view({2, 3}).t().contiguous()));  // strided
  CHECK_FALSE(equal(from_vector<double>({kNan}, {1}), from_vector<double>({kNan}, {1})));
  Tensor x = arange(6).view({2, 3}).to(DType::f32);
  Tensor y = x.clone();
  y.view({6}).slice(0, 5, 6).fill_(9.0);
  CHECK_FALSE(equal(x, y));
  CHECK(equal(zeros({0, 3}), zeros({0, 3})));
  CHECK_THROWS_AS(equal(Tensor(), zeros({1})), ValueError);
}
