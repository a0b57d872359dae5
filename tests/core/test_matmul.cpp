// matmul / bmm / mm / linear / linear_gelu against a plain double loop (matmul_reference.h), on random
// inputs of every floating dtype, odd sizes (Eigen's blocking edges), strided views (transposed,
// sliced with a step, expanded batches), batch broadcasting, thread-count independence and the
// error messages.
#include "test_util.h"

#include <algorithm>

#include "matmul_reference.h"

using namespace kiln;

namespace {

using test::Expected;
using test::reference_matmul;

void check_product(const Tensor& out, const Expected& e, DType dt, int64_t k, const std::string& what) {
  test::check_product_within(out, e, dt, test::product_tolerance(test::rtol_for(dt), k), what);
}

void check_matmul(const Tensor& a, const Tensor& b, const std::string& what) {
  const int64_t k = a.shape().back();
  check_product(ops::matmul(a, b), reference_matmul(a, b), a.dtype(), k, what);
}

const DType kFloating[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

std::string name(DType dt, int64_t m, int64_t k, int64_t n) {
  return detail::str_cat(dt, " ", m, "x", k, "x", n);
}

}  // namespace

TEST_CASE("mm and matmul on 2-D operands: every dtype, odd sizes") {
  const int64_t sizes[][3] = {{1, 1, 1}, {7, 33, 65}, {65, 7, 33}, {33, 65, 1}, {1, 65, 7}, {65, 65, 65},
                              {7, 1, 33}, {130, 67, 129}};
  uint64_t seed = 1;
  for (DType dt : kFloating)
    for (auto& s : sizes) {
      Tensor a = test::random({s[0], s[1]}, dt, seed++), b = test::random({s[1], s[2]}, dt, seed++);
      check_matmul(a, b, "matmul " + name(dt, s[0], s[1], s[2]));
      check_product(ops::mm(a, b), reference_matmul(a, b), dt, s[1], "mm " + name(dt, s[0], s[1], s[2]));
    }
}

TEST_CASE("matmul on strided views: transposed, sliced with a step, column slices") {
  for (DType dt : kFloating) {
    Tensor at_ = test::random({33, 7}, dt, 11).t();         // (7, 33) column-major
    Tensor bt = test::random({65, 33}, dt, 12).t();          // (33, 65) column-major
    Tensor a = test::random({7, 33}, dt, 13), b = test::random({33, 65}, dt, 14);
    check_matmul(at_, b, detail::str_cat(dt, " a^T"));
    check_matmul(a, bt, detail::str_cat(dt, " b^T"));
    check_matmul(at_, bt, detail::str_cat(dt, " a^T b^T"));
    Tensor wide = test::random({14, 80}, dt, 15);
    Tensor rows_cols = wide.slice(0, 0, 14, 2).slice(1, 3, 36);  // (7, 33), outer stride 160
    check_matmul(rows_cols, b, detail::str_cat(dt, " row-major with an outer stride"));
    Tensor stepped = wide.slice(1, 0, 66, 2);                   // (14, 33), inner stride 2: copied
    check_matmul(stepped, b, detail::str_cat(dt, " inner stride 2"));
    Tensor both = test::random({66, 40}, dt, 16).slice(0, 0, 66, 2).slice(1, 1, 40, 3);  // (33, 13)
    check_matmul(a, both, detail::str_cat(dt, " stepped rhs"));
  }
}

TEST_CASE("matmul with 1-D operands: dot, matrix-vector, vector-matrix, batched") {
  for (DType dt : kFloating) {
    Tensor v = test::random({65}, dt, 21), w = test::random({65}, dt, 22);
    Tensor d = ops::matmul(v, w);
    CHECK(d.dim() == 0);
    check_matmul(v, w, detail::str_cat(dt, " dot"));
    check_matmul(test::random({7, 65}, dt, 23), v, detail::str_cat(dt, " mv"));
    check_matmul(v, test::random({65, 33}, dt, 24), detail::str_cat(dt, " vm"));
    check_matmul(test::random({2, 3, 7, 65}, dt, 25), v, detail::str_cat(dt, " batched mv"));
    check_matmul(v, test::random({3, 65, 7}, dt, 26), detail::str_cat(dt, " vector times batch"));
    check_matmul(test::random({130}, dt, 27).slice(0, 0, 130, 2), test::random({65, 2}, dt, 28),
                 detail::str_cat(dt, " strided vector"));
  }
}

TEST_CASE("batched matmul: broadcasting, expanded and transposed batches, bmm") {
  for (DType dt : kFloating) {
    check_matmul(test::random({2, 1, 7, 5}, dt, 31), test::random({3, 5, 4}, dt, 32),
                 detail::str_cat(dt, " [2,1,7,5] @ [3,5,4]"));
    check_matmul(test::random({4, 33, 65}, dt, 33), test::random({65, 7}, dt, 34),
                 detail::str_cat(dt, " batch @ matrix (folded)"));
    check_matmul(test::random({7, 4, 65}, dt, 35).transpose(0, 1), test::random({65, 7}, dt, 36),
                 detail::str_cat(dt, " permuted batch @ matrix (not foldable)"));
    check_matmul(test::random({33, 65}, dt, 37), test::random({3, 65, 7}, dt, 38),
                 detail::str_cat(dt, " matrix @ batch"));
    Tensor e = test::random({1, 7, 33}, dt, 39).expand({5, 7, 33});
    check_matmul(e, test::random({5, 33, 7}, dt, 40), detail::str_cat(dt, " expanded batch"));
    Tensor at_ = test::random({6, 33, 7}, dt, 41).transpose(1, 2);  // (6, 7, 33)
    Tensor bt = test::random({6, 1, 33}, dt, 42).transpose(1, 2);   // (6, 33, 1)
    check_matmul(at_, bt, detail::str_cat(dt, " transposed batches"));
    Tensor a = test::random({5, 7, 33}, dt, 43), b = test::random({5, 33, 65}, dt, 44);
    check_product(ops::bmm(a, b), reference_matmul(a, b), dt, 33, detail::str_cat(dt, " bmm"));
    check_product(ops::bmm(at_, test::random({6, 65, 33}, dt, 45).transpose(1, 2)),
                  reference_matmul(at_, test::random({6, 65, 33}, dt, 45).transpose(1, 2)), dt, 33,
                  detail::str_cat(dt, " bmm transposed"));
  }
  // Big matrices in a batch: Eigen threads each product.
  Tensor a = test::random({2, 130, 131}, DType::f32, 46), b = test::random({131, 129}, DType::f32, 47);
  check_matmul(a.transpose(1, 2).contiguous().transpose(1, 2), b, "big batch, column-major");
}

TEST_CASE("batched small products give identical bits for any thread count") {
  Tensor a = test::random({64, 9, 17}, DType::f32, 51), b = test::random({64, 17, 5}, DType::f32, 52);
  Tensor big_a = test::random({3, 100, 120}, DType::f32, 53), big_b = test::random({3, 120, 90}, DType::f32, 54);
  const int saved = num_threads();
  set_num_threads(1);
  auto one = test::values(ops::bmm(a, b));
  auto big_one = test::values(ops::bmm(big_a, big_b));
  set_num_threads(std::max(2, saved));
  auto many = test::values(ops::bmm(a, b));
  auto big_many = test::values(ops::bmm(big_a, big_b));
  set_num_threads(saved);
  CHECK(one == many);
  test::check_close(big_many, big_one, 1e-5, 1e-5, "big products, 1 vs many threads");
}

TEST_CASE("empty inner dimension gives zeros") {
  Tensor z = ops::mm(test::random({3, 0}), test::random({0, 4}));
  CHECK(z.shape() == Shape{3, 4});
  CHECK(test::values(z) == std::vector<double>(12, 0.0));
}

TEST_CASE("linear = x @ weight^T + bias") {
  for (DType dt : kFloating) {
    Tensor w = test::random({7, 33}, dt, 61), bias = test::random({7}, dt, 62);
    Tensor x = test::random({2, 5, 33}, dt, 63);
    check_product(ops::linear(x, w, bias), reference_matmul(x, w.t(), bias), dt, 33,
                  detail::str_cat(dt, " linear 3-D"));
    check_product(ops::linear(x, w), reference_matmul(x, w.t()), dt, 33, detail::str_cat(dt, " no bias"));
    Tensor x1 = test::random({33}, dt, 64);
    Tensor y1 = ops::linear(x1, w, bias);
    CHECK(y1.shape() == Shape{7});
    check_product(y1, reference_matmul(x1, w.t(), bias), dt, 33, detail::str_cat(dt, " 1-D input"));
    Tensor xt = test::random({33, 65}, dt, 65).t();  // (65, 33) column-major input
    Tensor wt = test::random({33, 7}, dt, 66).t();   // (7, 33) row-major weight^T view
    check_product(ops::linear(xt, wt, bias), reference_matmul(xt, wt.t(), bias), dt, 33,
                  detail::str_cat(dt, " transposed operands"));
  }
  Tensor in0 = ops::linear(test::random({3, 0}), test::random({2, 0}), tensor({1.5f, -2.f}));
  CHECK(test::values(in0) == std::vector<double>{1.5, -2, 1.5, -2, 1.5, -2});
}

TEST_CASE("linear_gelu = gelu_tanh(linear), keeping the pre-activation") {
  for (DType dt : kFloating) {
    const double tol = test::product_tolerance(test::rtol_for(dt), 33);
    Tensor w = test::random({7, 33}, dt, 71), bias = test::random({7}, dt, 72);
    Tensor x = test::random({2, 5, 33}, dt, 73);
    for (bool with_bias : {true, false}) {
      const Tensor b = with_bias ? bias : Tensor();
      const std::string what = detail::str_cat(dt, with_bias ? " with bias" : " without bias");
      ops::LinearGelu r = ops::linear_gelu(x, w, b);
      const Expected e = reference_matmul(x, w.t(), b);
      test::check_product_within(r.pre_gelu, e, dt, tol, what + " pre_gelu");
      test::check_gelu(r.out, e, dt, tol, test::rtol_for(dt), 0.0, what + " out");
    }
    Tensor x1 = test::random({33}, dt, 74);
    ops::LinearGelu r1 = ops::linear_gelu(x1, w, bias);
    CHECK(r1.out.shape() == Shape{7});
    CHECK(r1.pre_gelu.shape() == Shape{7});
    test::check_gelu(r1.out, reference_matmul(x1, w.t(), bias), dt, tol, test::rtol_for(dt), 0.0,
                     detail::str_cat(dt, " 1-D input"));
  }
  // Values of both signs and beyond |x| = 3, where tanh GELU differs most from x and from 0.
  Tensor x = test::random({4, 16}, DType::f64, 75, -6, 6), w = test::random({9, 16}, DType::f64, 76, -1, 1);
  ops::LinearGelu r = ops::linear_gelu(x, w);
  test::check_gelu(r.out, reference_matmul(x, w.t()), DType::f64, 1e-12, 1e-12, 0.0, "f64 wide range");
  CHECK_ERROR_CONTAINS(ops::linear_gelu(test::random({2, 5}), test::random({3, 4})), "linear_gelu", "[2, 5]",
                       "[3, 4]");
  CHECK_ERROR_CONTAINS(ops::linear_gelu(test::random({2, 4}), test::random({3, 4}), test::random({4})),
                       "linear_gelu", "[3]", "[4]");
}

TEST_CASE("bad operands name the shapes and dtypes") {
  Tensor a = test::random({3, 4}), b = test::random({5, 6});
  CHECK_ERROR_CONTAINS(ops::matmul(a, b), "matmul", "[3, 4]", "[5, 6]");
  CHECK_ERROR_CONTAINS(ops::mm(a, b), "mm", "[3, 4]", "[5, 6]");
  CHECK_ERROR_CONTAINS(ops::matmul(test::random({2, 3, 4}), test::random({3, 4, 2})), "matmul", "[2]", "[3]");
  CHECK_ERROR_CONTAINS(ops::matmul(full({}, 1.0), a), "matmul", "at least 1 dim");
  CHECK_ERROR_CONTAINS(ops::mm(test::random({3}), a), "mm", "2-D", "[3]");
  CHECK_ERROR_CONTAINS(ops::bmm(a, a), "bmm", "3-D", "[3, 4]");
  CHECK_ERROR_CONTAINS(ops::bmm(test::random({2, 3, 4}), test::random({3, 4, 5})), "bmm", "[2, 3, 4]",
                       "[3, 4, 5]");
  CHECK_ERROR_CONTAINS(ops::matmul(test::random({3, 4}, DType::i64), test::random({4, 2}, DType::i64)), "matmul",
                       "i64");
  CHECK_ERROR_CONTAINS(ops::mm(test::random({3, 4}, DType::i32), test::random({4, 2})), "mm", "i32");
  CHECK_ERROR_CONTAINS(ops::matmul(test::random({3, 4}, DType::f64), test::random({4, 2})), "f64", "f32");
  CHECK_ERROR_CONTAINS(ops::linear(test::random({2, 5}), test::random({3, 4})), "linear", "[2, 5]", "[3, 4]");
  CHECK_ERROR_CONTAINS(ops::linear(test::random({2, 4}), test::random({3, 4}), test::random({4})), "linear",
                       "[3]", "[4]");
  CHECK_ERROR_CONTAINS(ops::linear(test::random({2, 4}), test::random({3, 4}), test::random({3}, DType::f64)),
                       "linear", "f64");
}
