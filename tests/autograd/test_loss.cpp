// cross_entropy and mse_loss: forward values against plain double loops written here (torch's
// semantics for ignore_index, label_smoothing and each reduction), float64 gradchecks for every
// option, the gradient's zero rows for ignored targets, and bad-input errors.
#include "test_util.h"

#include <limits>

using namespace kiln;

namespace {
Tensor ids(const std::vector<int64_t>& v) { return from_vector(v, {static_cast<int64_t>(v.size())}); }

// Per-row losses (0 for ignored rows), then the reduction, all in double.
std::vector<double> ce_reference(const Tensor& logits, const std::vector<int64_t>& t, int64_t ignore, double ls,
                                 Reduction r) {
  const int64_t c = logits.size(-1), n = logits.numel() / c;
  std::vector<double> x = test::values(logits), rows(n);
  double total = 0, counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore) continue;
    double m = -std::numeric_limits<double>::infinity(), z = 0, sum_logp = 0;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, x[i * c + j]);
    for (int64_t j = 0; j < c; ++j) z += std::exp(x[i * c + j] - m);
    const double lse = m + std::log(z);
    for (int64_t j = 0; j < c; ++j) sum_logp += x[i * c + j] - lse;
    rows[i] = -(1 - ls) * (x[i * c + t[i]] - lse) - ls / double(c) * sum_logp;
    total += rows[i];
    counted += 1;
  }
  if (r == Reduction::none) return rows;
  if (r == Reduction::sum) return {total};
  return {total / counted};
}

const std::pair<const char*, Reduction> kReductions[] = {
    {"none", Reduction::none}, {"mean", Reduction::mean}, {"sum", Reduction::sum}};
}  // namespace

TEST_CASE("cross_entropy: values match a plain loop for every reduction, ignore_index and smoothing") {
  Tensor logits = test::random({5, 4}, DType::f64, 1, -3, 3);
  const std::vector<int64_t> t = {2, -100, 0, 3, 1};
  for (double ls : {0.0, 0.1}) {
    for (auto& [name, r] : kReductions) {
      CAPTURE(name);
      CAPTURE(ls);
      auto opts = CrossEntropyOptions().reduction(r).label_smoothing(ls);
      test::check_close(cross_entropy(logits, ids(t), opts), ce_reference(logits, t, -100, ls, r), 1e-12, 1e-12,
                        "cross_entropy");
    }
  }
  // A custom ignore_index; -100 is then an ordinary (out-of-range) value.
  const std::vector<int64_t> t2 = {2, 1, 1, 3, 0};
  auto opts = CrossEntropyOptions().ignore_index(1);
  test::check_close(cross_entropy(logits, ids(t2), opts), ce_reference(logits, t2, 1, 0.0, Reduction::mean), 1e-12,
                    1e-12, "ignore_index 1");
  CHECK(cross_entropy(logits, ids(t2), CrossEntropyOptions().reduction(Reduction::none)).shape() == Shape{5});
  // Unbatched: logits (C) with a 0-dim target.
  Tensor row = logits.select(0, 3);
  Tensor one = cross_entropy(row, scalar_tensor(3, DType::i64), CrossEntropyOptions().reduction(Reduction::none));
  CHECK(one.dim() == 0);
  test::check_close(one, {ce_reference(logits, t, -100, 0, Reduction::none)[3]}, 1e-12, 1e-12, "unbatched");
}

TEST_CASE("cross_entropy: 3-D logits flatten to rows; f32 and i32 targets work") {
  Tensor logits = test::random({2, 3, 4}, DType::f64, 2, -3, 3);
  const std::vector<int64_t> t = {0, 3, -100, 1, 2, 2};
  Tensor t2d = ids(t).view({2, 3});
  Tensor none = cross_entropy(logits, t2d, CrossEntropyOptions().reduction(Reduction::none));
  CHECK(none.shape() == Shape{2, 3});
  test::check_close(none, ce_reference(logits, t, -100, 0, Reduction::none), 1e-12, 1e-12, "3-D none");
  test::check_close(cross_entropy(logits, ids(t)), ce_reference(logits, t, -100, 0, Reduction::mean), 1e-12, 1e-12,
                    "flat targets");
  Tensor f = logits.to(DType::f32);
  Tensor l32 = cross_entropy(f, t2d.to(DType::i32), CrossEntropyOptions().label_smoothing(0.1));
  CHECK(l32.dtype() == DType::f32);
  test::check_close(l32, ce_reference(logits, t, -100, 0.1, Reduction::mean), 1e-5, 1e-6, "f32");
}

TEST_CASE("cross_entropy: every target ignored gives nan for mean, 0 for sum") {
  Tensor logits = test::grad_leaf({3, 4}, 3);
  Tensor t = ids({-100, -100, -100});
  CHECK(std::isnan(cross_entropy(logits, t).item()));
  Tensor s = cross_entropy(logits, t, CrossEntropyOptions().reduction(Reduction::sum));
  CHECK(s.item() == 0.0);
  s.backward();
  CHECK(test::values(logits.grad()) == std::vector<double>(12, 0.0));
}

TEST_CASE("cross_entropy: gradcheck for each reduction, smoothing, ignored rows and 3-D logits") {
  const Tensor t = ids({2, -100, 0, 3, 1, -100});
  for (double ls : {0.0, 0.1}) {
    for (auto& [name, r] : kReductions) {
      CAPTURE(name);
      CAPTURE(ls);
      auto opts = CrossEntropyOptions().reduction(r).label_smoothing(ls);
      CHECK(gradcheck([&](const auto& v) { return cross_entropy(v[0], t, opts); }, {test::grad_leaf({6, 4}, 4)}));
    }
  }
  Tensor t3 = ids({1, 0, 4, -100, 2, 3}).view({2, 3});
  for (auto& [name, r] : kReductions) {
    CAPTURE(name);
    auto opts = CrossEntropyOptions().reduction(r).label_smoothing(0.1);
    CHECK(gradcheck([&](const auto& v) { return cross_entropy(v[0], t3, opts); }, {test::grad_leaf({2, 3, 5}, 5)}));
  }
  // Through a non-contiguous view of the logits.
  CHECK(gradcheck([&](const auto& v) { return cross_entropy(v[0].t(), ids({0, 1, 2})); }, {test::grad_leaf({4, 3}, 6)}));
}

TEST_CASE("cross_entropy: the gradient is (softmax - onehot) / count, zero on ignored rows") {
  Tensor logits = test::grad_leaf({3, 3}, 7);
  cross_entropy(logits, ids({1, -100, 2})).backward();
  std::vector<double> x = test::values(logits), g = test::values(logits.grad());
  const int64_t target[3] = {1, -1, 2};
  for (int64_t i = 0; i < 3; ++i) {
    double z = 0;
    for (int64_t j = 0; j < 3; ++j) z += std::exp(x[i * 3 + j]);
    for (int64_t j = 0; j < 3; ++j) {
      double want = target[i] < 0 ? 0.0 : (std::exp(x[i * 3 + j]) / z - (j == target[i] ? 1.0 : 0.0)) / 2.0;
      CHECK(g[i * 3 + j] == doctest::Approx(want).epsilon(1e-12));
    }
  }
}

TEST_CASE("cross_entropy: classes takes the first columns as the slice would, padded columns get zero gradient") {
  // GPT's padded vocabulary (Note [Padded vocabulary]): 2 x 3 rows of 11 columns, 7 of them classes.
  for (auto& [name, r] : kReductions) {
    CAPTURE(name);
    auto opts = CrossEntropyOptions().reduction(r).label_smoothing(0.1).ignore_index(-1);
    Tensor a = test::grad_leaf({2, 3, 11}, 31), b = test::grad_leaf({2, 3, 11}, 31);
    Tensor t = ids({0, 6, -1, 3, 2, 5}).view({2, 3});
    Tensor want = cross_entropy(a.slice(2, 0, 7), t, opts);
    Tensor got = cross_entropy(b, t, CrossEntropyOptions(opts).classes(7));
    CHECK(test::values(got) == test::values(want));
    Tensor up = r == Reduction::none ? test::random({2, 3}, DType::f64, 32) : scalar_tensor(1.5, DType::f64);
    want.backward(up);
    got.backward(up);
    CHECK(b.grad().shape() == Shape{2, 3, 11});
    CHECK(test::values(b.grad()) == test::values(a.grad()));  // zeros in columns 7..10 on both sides
  }
  Tensor x = test::random({3, 5}, DType::f32, 33);
  CHECK_ERROR_CONTAINS(cross_entropy(x, ids({0, 1, 2}), CrossEntropyOptions().classes(6)), "cross_entropy",
                       "classes (6)", "5");
  CHECK_ERROR_CONTAINS(cross_entropy(x, ids({0, 4, 2}), CrossEntropyOptions().classes(3)), "target 4", "row 1",
                       "3 classes");
  CHECK_ERROR_CONTAINS(cross_entropy(x, ids({0, 1, 2}), CrossEntropyOptions().classes(-5)), "classes (-5)");
  CHECK_ERROR_CONTAINS(cross_entropy(x, ids({0, 1, 2}), CrossEntropyOptions().classes(0)), "classes (0)");
}

TEST_CASE("cross_entropy: bad targets, shapes and dtypes are errors") {
  Tensor logits = test::random({3, 4}, DType::f32, 8);
  CHECK_ERROR_CONTAINS(cross_entropy(logits, ids({0, 7, 1})), "cross_entropy", "target 7", "row 1", "4 classes");
  CHECK_ERROR_CONTAINS(cross_entropy(logits, ids({0, 1, -1})), "target -1", "row 2");
  CHECK_ERROR_CONTAINS(cross_entropy(logits, ids({0, 1})), "cross_entropy", "[2]", "[3, 4]");
  CHECK_ERROR_CONTAINS(cross_entropy(logits, ids({0, 1, 2}).to(DType::f32)), "cross_entropy", "f32");
  CHECK_ERROR_CONTAINS(cross_entropy(arange(12).view({3, 4}), ids({0, 1, 2})), "cross_entropy", "i64");
  CHECK_ERROR_CONTAINS(cross_entropy(logits, ids({0, 1, 2}), CrossEntropyOptions().label_smoothing(1.5)),
                       "label_smoothing", "1.5");
}

TEST_CASE("mse_loss: values and gradcheck for every reduction") {
  Tensor a = test::grad_leaf({3, 4}, 9), b = test::grad_leaf({3, 4}, 10);
  std::vector<double> av = test::values(a), bv = test::values(b), sq(12);
  double total = 0;
  for (int i = 0; i < 12; ++i) total += sq[i] = (av[i] - bv[i]) * (av[i] - bv[i]);
  test::check_close(mse_loss(a, b, Reduction::none), sq, 1e-14, 0, "none");
  test::check_close(mse_loss(a, b, Reduction::sum), {total}, 1e-14, 0, "sum");
  test::check_close(mse_loss(a, b), {total / 12}, 1e-14, 0, "mean");
  for (auto& [name, r] : kReductions) {
    CAPTURE(name);
    CHECK(gradcheck([r](const auto& v) { return mse_loss(v[0], v[1], r); }, {a, b}));
  }
  CHECK_ERROR_CONTAINS(mse_loss(a, test::grad_leaf({4, 3}, 11)), "mse_loss", "[3, 4]", "[4, 3]");
  CHECK_ERROR_CONTAINS(mse_loss(arange(3), arange(3)), "mse_loss", "i64");
}
