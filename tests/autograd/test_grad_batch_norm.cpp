// batch_norm: gradcheck in training (with and without affine, 2-D and 4-D) and eval mode, forward
// values and the in-place running-stat update against plain double loops, and bad inputs.
#include "test_util.h"

using namespace kiln;

namespace {

// Per-channel statistics of x (N, C, *) computed by hand: mean, biased and unbiased variance.
struct Stats {
  std::vector<double> mean, var, var_unbiased;
};
Stats channel_stats(const Tensor& x) {
  const int64_t c = x.size(1);
  std::vector<double> v = test::values(x);
  const int64_t inner = x.numel() / (x.size(0) * c), m = x.numel() / c;
  Stats s{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  auto channel_of = [&](int64_t i) { return (i / inner) % c; };
  for (int64_t i = 0; i < x.numel(); ++i) s.mean[channel_of(i)] += v[i] / m;
  for (int64_t i = 0; i < x.numel(); ++i) {
    double d = v[i] - s.mean[channel_of(i)];
    s.var[channel_of(i)] += d * d / m;
    s.var_unbiased[channel_of(i)] += d * d / (m - 1);
  }
  return s;
}

// (x - mean) / sqrt(var + eps) * w + b per element, by hand.
std::vector<double> normalize(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& var,
                              const std::vector<double>& w, const std::vector<double>& b, double eps) {
  const int64_t c = x.size(1), inner = x.numel() / (x.size(0) * c);
  std::vector<double> v = test::values(x);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t ch = (i / inner) % c;
    v[i] = (v[i] - mean[ch]) / std::sqrt(var[ch] + eps) * w[ch] + b[ch];
  }
  return v;
}
}  // namespace

TEST_CASE("gradcheck: batch_norm in training mode, 2-D and 4-D, with and without affine") {
  for (const Shape& shape : {Shape{5, 3}, Shape{2, 3, 3, 2}, Shape{3, 3, 4}}) {
    CAPTURE(shape);
    Tensor x = test::grad_leaf(shape, 1);
    Tensor w = test::grad_leaf({3}, 2, 0.5, 2.0), b = test::grad_leaf({3}, 3);
    Tensor rm = zeros({3}, DType::f64), rv = ones({3}, DType::f64);
    CHECK(gradcheck([&](const auto& v) { return batch_norm(v[0], rm, rv, v[1], v[2], true); }, {x, w, b}));
    CHECK(gradcheck([](const auto& v) { return batch_norm(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true); },
                    {x}));
    CHECK(gradcheck([&](const auto& v) { return batch_norm(v[0], Tensor(), Tensor(), w.detach(), Tensor(), true); },
                    {x}));
  }
}

TEST_CASE("gradcheck: batch_norm in eval mode uses the running statistics") {
  for (const Shape& shape : {Shape{4, 3}, Shape{2, 3, 3, 2}}) {
    CAPTURE(shape);
    Tensor x = test::grad_leaf(shape, 4);
    Tensor w = test::grad_leaf({3}, 5, 0.5, 2.0), b = test::grad_leaf({3}, 6);
    Tensor rm = test::random({3}, DType::f64, 7), rv = test::random({3}, DType::f64, 8, 0.5, 2.0);
    CHECK(gradcheck([&](const auto& v) { return batch_norm(v[0], rm, rv, v[1], v[2], false); }, {x, w, b}));
    CHECK(gradcheck([&](const auto& v) { return batch_norm(v[0], rm, rv, Tensor(), Tensor(), false); }, {x}));
  }
}

TEST_CASE("batch_norm training: forward values and running-stat update match double loops") {
  for (DType dt : {DType::f64, DType::f32}) {
    CAPTURE(dt);
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    Tensor x = test::random({3, 2, 2, 3}, dt, 9, -1.0, 3.0);
    const std::vector<double> w0{1.5, -0.5}, b0{0.25, 2.0}, rm0{0.5, -0.3}, rv0{1.2, 0.8};
    Tensor w = from_vector(w0, {2}).to(dt), b = from_vector(b0, {2}).to(dt);
    Tensor rm = from_vector(rm0, {2}).to(dt), rv = from_vector(rv0, {2}).to(dt);
    Tensor out = batch_norm(x, rm, rv, w, b, /*training=*/true, /*momentum=*/0.1, /*eps=*/1e-5);
    const Stats s = channel_stats(x);
    test::check_close(out, normalize(x, s.mean, s.var, w0, b0, 1e-5), tol, tol, "output");
    CHECK(out.dtype() == dt);
    std::vector<double> rm_expected(2), rv_expected(2);
    for (int c = 0; c < 2; ++c) {
      rm_expected[c] = 0.9 * rm0[c] + 0.1 * s.mean[c];
      rv_expected[c] = 0.9 * rv0[c] + 0.1 * s.var_unbiased[c];
    }
    test::check_close(rm, rm_expected, tol, tol, "running_mean");
    test::check_close(rv, rv_expected, tol, tol, "running_var");
  }
}

TEST_CASE("batch_norm training: 2-D input, other momentum, and the update also runs under no_grad") {
  Tensor x = test::random({6, 3}, DType::f64, 10);
  Tensor rm = zeros({3}, DType::f64), rv = ones({3}, DType::f64);
  const Stats s = channel_stats(x);
  {
    NoGradGuard no_grad;
    Tensor out = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.3, 1e-3);
    test::check_close(out, normalize(x, s.mean, s.var, {1, 1, 1}, {0, 0, 0}, 1e-3), 1e-12, 1e-12, "output");
  }
  std::vector<double> rm_expected(3), rv_expected(3);
  for (int c = 0; c < 3; ++c) {
    rm_expected[c] = 0.3 * s.mean[c];
    rv_expected[c] = 0.7 + 0.3 * s.var_unbiased[c];
  }
  test::check_close(rm, rm_expected, 1e-12, 1e-12, "running_mean");
  test::check_close(rv, rv_expected, 1e-12, 1e-12, "running_var");
}

TEST_CASE("batch_norm eval: normalizes with the running stats and leaves them unchanged") {
  Tensor x = test::grad_leaf({2, 3, 2, 2}, 11);
  const std::vector<double> w0{0.5, 1.0, -2.0}, b0{0.0, 1.0, -1.0}, rm0{0.1, -0.4, 0.7}, rv0{0.9, 1.5, 0.3};
  Tensor w = from_vector(w0, {3}), b = from_vector(b0, {3});
  Tensor rm = from_vector(rm0, {3}), rv = from_vector(rv0, {3});
  Tensor out = batch_norm(x, rm, rv, w, b, /*training=*/false);
  test::check_close(out, normalize(x, rm0, rv0, w0, b0, 1e-5), 1e-12, 1e-12, "output");
  CHECK(test::values(rm) == rm0);
  CHECK(test::values(rv) == rv0);
  // The eval gradient is the affine one: dx = w / sqrt(running_var + eps).
  out.backward(ones(x.shape(), DType::f64));
  std::vector<double> expected(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) expected[i] = w0[(i / 4) % 3] / std::sqrt(rv0[(i / 4) % 3] + 1e-5);
  test::check_close(x.grad(), expected, 1e-12, 0, "eval dx");
}

TEST_CASE("batch_norm training: dweight and dbias are the per-channel sums") {
  Tensor x = test::random({4, 2, 3}, DType::f64, 12);
  Tensor w = test::grad_leaf({2}, 13), b = test::grad_leaf({2}, 14);
  Tensor out = batch_norm(x, Tensor(), Tensor(), w, b, true);
  Tensor dy = test::random({4, 2, 3}, DType::f64, 15);
  out.backward(dy);
  const Stats s = channel_stats(x);
  std::vector<double> xv = test::values(x), dyv = test::values(dy), dw(2, 0.0), db(2, 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t c = (i / 3) % 2;
    dw[c] += dyv[i] * (xv[i] - s.mean[c]) / std::sqrt(s.var[c] + 1e-5);
    db[c] += dyv[i];
  }
  test::check_close(w.grad(), dw, 1e-10, 1e-12, "dweight");
  test::check_close(b.grad(), db, 1e-12, 1e-12, "dbias");
}

TEST_CASE("batch_norm: bad inputs are reported with their shapes") {
  Tensor x = test::grad_leaf({4, 3, 2, 2}, 16);
  Tensor c3 = ones({3}, DType::f64), c4 = ones({4}, DType::f64);
  CHECK_ERROR_CONTAINS(batch_norm(x, c3, c3, c4, c3, true), "batch_norm", "weight", "[3]", "[4]");
  CHECK_ERROR_CONTAINS(batch_norm(x, c3, c3, c3, c4, true), "batch_norm", "bias", "[4]");
  CHECK_ERROR_CONTAINS(batch_norm(x, c4, c3, c3, c3, true), "batch_norm", "running_mean", "[4]");
  CHECK_ERROR_CONTAINS(batch_norm(x, c3, ones({3, 1}, DType::f64), c3, c3, true), "running_var", "[3, 1]");
  CHECK_ERROR_CONTAINS(batch_norm(x, c3, Tensor(), c3, c3, true), "running_mean and running_var");
  CHECK_ERROR_CONTAINS(batch_norm(test::grad_leaf({5}, 17), Tensor(), Tensor(), Tensor(), Tensor(), true), "at least 2 dims",
                       "[5]");
  CHECK_ERROR_CONTAINS(batch_norm(test::grad_leaf({1, 3}, 18), Tensor(), Tensor(), Tensor(), Tensor(), true),
                       "more than 1 value per channel", "[1, 3]");
  CHECK_ERROR_CONTAINS(batch_norm(x, Tensor(), Tensor(), c3, c3, false), "eval mode");
  CHECK_ERROR_CONTAINS(batch_norm(ones({2, 3}, DType::i64), Tensor(), Tensor(), Tensor(), Tensor(), true),
                       "floating");
}
