// linear_cross_entropy (Note [Chunked LM head]) against its unfused composition, cross_entropy of
// linear(x, weight) sliced to `classes`: f64 to 1e-12 over chunk sizes that split the rows unevenly,
// ignored targets, the sum reduction, bf16 autocast, no-grad, and its errors.
#include "test_util.h"

using namespace kiln;

namespace {

struct Result {
  double loss;
  std::vector<double> dx, dw;
};

Result run(bool fused, const Tensor& x0, const Tensor& w0, const Tensor& t, int64_t classes, int64_t chunk,
           Reduction reduction, DType autocast = DType::f32) {
  Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true);
  Tensor loss;
  {
    AutocastGuard guard(autocast == DType::f32 ? DType::bf16 : autocast, autocast != DType::f32);
    if (fused) {
      loss = linear_cross_entropy(x, w, t, LinearCrossEntropyOptions().classes(classes).chunk_rows(chunk)
                                                 .ignore_index(-1).reduction(reduction));
    } else {
      Tensor logits = linear(x, w).slice(-1, 0, classes);
      loss = cross_entropy(logits, t, CrossEntropyOptions().ignore_index(-1).reduction(reduction));
    }
  }
  (loss * 1.7).backward();
  return {loss.item(), test::values(x.grad()), test::values(w.grad())};
}

void check_close(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  CHECK(worst <= tol);
}

Tensor targets(const Shape& shape, int64_t classes, uint64_t seed) {
  Tensor t = test::random(shape, DType::f64, seed, 0.0, double(classes)).to(DType::i64);
  // Every fifth target ignored.
  std::vector<int64_t> v = t.reshape({-1}).to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); i += 5) v[i] = -1;
  return from_vector(v, shape);
}

}  // namespace

TEST_CASE("linear_cross_entropy equals cross_entropy(linear(x, w)[..., :classes]) in f64, any chunking") {
  const Tensor x = test::random({3, 13, 8}, DType::f64, 1);  // 39 rows
  const Tensor w = test::random({11, 8}, DType::f64, 2, -0.5, 0.5);
  const Tensor t = targets({3, 13}, 9, 3);
  for (Reduction reduction : {Reduction::mean, Reduction::sum}) {
    const Result ref = run(false, x, w, t, 9, 0, reduction);
    for (int64_t chunk : {1, 5, 16, 39, 0}) {
      INFO("chunk_rows ", chunk, ", reduction ", reduction == Reduction::mean ? "mean" : "sum");
      const Result r = run(true, x, w, t, 9, chunk, reduction);
      CHECK(r.loss == doctest::Approx(ref.loss).epsilon(1e-13));
      check_close(r.dx, ref.dx, 1e-12);
      check_close(r.dw, ref.dw, 1e-12);
    }
  }
  // Rows of w past `classes` get zero gradient.
  const Result r = run(true, x, w, t, 9, 4, Reduction::mean);
  for (size_t i = 9 * 8; i < r.dw.size(); ++i) CHECK(r.dw[i] == 0.0);
}

TEST_CASE("linear_cross_entropy under bf16 autocast: f32 loss, gradients in the inputs' dtypes, close to unfused") {
  const Tensor x = test::random({64, 32}, DType::f32, 4);
  const Tensor w = test::random({50, 32}, DType::f32, 5, -0.3, 0.3);
  const Tensor t = targets({64}, 50, 6);
  const Result ref = run(false, x, w, t, 50, 0, Reduction::mean, DType::bf16);
  const Result r = run(true, x, w, t, 50, 24, Reduction::mean, DType::bf16);
  CHECK(r.loss == doctest::Approx(ref.loss).epsilon(1e-3));
  double scale = 0;
  for (double v : ref.dw) scale = std::max(scale, std::abs(v));
  check_close(r.dx, ref.dx, 2e-2 * scale + 1e-4);
  check_close(r.dw, ref.dw, 2e-2 * scale);
  Tensor xr = x.detach().requires_grad_(true), wr = w.detach().requires_grad_(true);
  Tensor loss;
  {
    AutocastGuard guard(DType::bf16);
    loss = linear_cross_entropy(xr, wr, t, LinearCrossEntropyOptions().ignore_index(-1));
  }
  CHECK(loss.dtype() == DType::f32);
  loss.backward();
  CHECK(xr.grad().dtype() == DType::f32);
  CHECK(wr.grad().dtype() == DType::f32);
}

TEST_CASE("linear_cross_entropy without gradients records nothing and gives the same loss") {
  const Tensor x = test::grad_leaf({10, 4}, 7);
  const Tensor w = test::grad_leaf({6, 4}, 8);
  const Tensor t = targets({10}, 6, 9);
  const double with_grad = linear_cross_entropy(x, w, t, LinearCrossEntropyOptions().ignore_index(-1)).item();
  NoGradGuard no_grad;
  Tensor loss = linear_cross_entropy(x, w, t, LinearCrossEntropyOptions().ignore_index(-1).chunk_rows(3));
  CHECK_FALSE(loss.requires_grad());
  CHECK(loss.item() == doctest::Approx(with_grad).epsilon(1e-13));
}

TEST_CASE("linear_cross_entropy rejects bad shapes, classes and targets, naming them") {
  const Tensor x = test::random({10, 4}, DType::f64, 1), w = test::random({6, 4}, DType::f64, 2);
  const Tensor t = targets({10}, 6, 3);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, test::random({6, 5}, DType::f64, 2), t),
                       doctest::Contains("x's last dim must be 5"), Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, w, t, LinearCrossEntropyOptions().classes(7)),
                       doctest::Contains("classes (7)"), Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, w, targets({9}, 6, 3)), doctest::Contains("do not match x"), Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, w, t, LinearCrossEntropyOptions().reduction(Reduction::none)),
                       doctest::Contains("reduction none"), Error);
  Tensor bad = from_vector(std::vector<int64_t>(10, 6), {10});  // class 6 of 6
  CHECK_THROWS_AS(linear_cross_entropy(x, w, bad), Error);
}
