// The raw fused cross-entropy ops (ops::cross_entropy_forward / _backward) on the CPU: the loss
// and logsumexp against double loops and against the composed log_softmax path, the gradient
// against the analytic formula and central finite differences in f64, every floating dtype, i32
// and i64 targets, ignored rows, label smoothing, special values and error messages.
#include <cmath>
#include <limits>

#include "test_util.h"

using namespace kiln;

namespace {

Tensor ids(const std::vector<int64_t>& v, DType dt = DType::i64) {
  return from_vector(v, {static_cast<int64_t>(v.size())}).to(dt);
}

struct Ref {
  std::vector<double> loss, lse;
  int64_t count = 0;
};

// Per-row loss and logsumexp in double (0 on ignored rows).
Ref reference(const std::vector<double>& x, int64_t c, const std::vector<int64_t>& t, int64_t ignore, double ls) {
  Ref r;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == ignore) {
      r.loss.push_back(0);
      r.lse.push_back(0);
      continue;
    }
    const double* xr = x.data() + i * c;
    double m = -INFINITY, z = 0, sum_logp = 0;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, xr[j]);
    for (int64_t j = 0; j < c; ++j) z += std::exp(xr[j] - m);
    const double lse = m + std::log(z);
    for (int64_t j = 0; j < c; ++j) sum_logp += xr[j] - lse;
    r.loss.push_back(-(1 - ls) * (xr[t[i]] - lse) - ls / double(c) * sum_logp);
    r.lse.push_back(lse);
    ++r.count;
  }
  return r;
}

// d loss_i / d x[i, j] * g_i * scale in double.
std::vector<double> reference_grad(const std::vector<double>& x, int64_t c, const std::vector<int64_t>& t,
                                   int64_t ignore, double ls, const std::vector<double>& g, double scale) {
  const Ref r = reference(x, c, t, ignore, ls);
  std::vector<double> d(x.size(), 0.0);
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == ignore) continue;
    const double gi = (g.size() == 1 ? g[0] : g[i]) * scale;
    for (int64_t j = 0; j < c; ++j) {
      const double p = std::exp(x[i * c + j] - r.lse[i]);
      d[i * c + j] = (p - (j == t[i] ? 1 - ls : 0) - ls / double(c)) * gi;
    }
  }
  return d;
}

// Targets for n rows of c classes: every third row ignored (when ignore is in play).
std::vector<int64_t> make_targets(int64_t n, int64_t c, int64_t ignore, uint64_t seed) {
  std::vector<double> u = test::values(test::random({n}, DType::f64, seed, 0, double(c)));
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(i % 3 == 1 ? ignore : std::min<int64_t>(c - 1, int64_t(u[i])));
  return t;
}

}  // namespace

TEST_CASE("cross_entropy_forward matches double loops in every dtype, for i64 and i32 targets") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    const DType ldt = dt == DType::f64 ? DType::f64 : DType::f32;
    const double rtol = dt == DType::f64 ? 1e-12 : 1e-5;  // the loss is computed from the stored logits
    for (int64_t c : {1, 7, 33, 1000}) {
      for (double ls : {0.0, 0.1}) {
        for (DType it : {DType::i64, DType::i32}) {
          CAPTURE(dt);
          CAPTURE(c);
          CAPTURE(ls);
          CAPTURE(it);
          const int64_t n = 6;
          Tensor x = test::random({n, c}, dt, uint64_t(c) + 1, -4, 4);
          const std::vector<int64_t> t = make_targets(n, c, -100, 7);
          ops::CrossEntropyResult r = ops::cross_entropy_forward(x, ids(t, it), -100, ls);
          const Ref ref = reference(test::values(x), c, t, -100, ls);
          CHECK(r.loss.dtype() == ldt);
          CHECK(r.lse.dtype() == ldt);
          CHECK(r.loss.shape() == Shape{n});
          CHECK(r.count.dtype() == DType::i64);
          CHECK(r.count.dim() == 0);
          CHECK(r.count.item() == double(ref.count));
          test::check_close(r.loss, ref.loss, rtol, rtol, "loss");
          test::check_close(r.lse, ref.lse, rtol, rtol, "lse");
        }
      }
    }
  }
}

TEST_CASE("cross_entropy_forward agrees with the composed log_softmax + gather path") {
  const int64_t n = 9, c = 300;
  Tensor x = test::random({n, c}, DType::f32, 3, -6, 6);
  const std::vector<int64_t> t = make_targets(n, c, 5, 4);  // ignore_index 5 (a valid class id)
  const double ls = 0.2;
  ops::CrossEntropyResult r = ops::cross_entropy_forward(x, ids(t), 5, ls);
  Tensor logp = ops::log_softmax(x, 1);
  std::vector<double> lp = test::values(logp), want;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == 5) {
      want.push_back(0);
      continue;
    }
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += lp[i * c + j];
    want.push_back(-(1 - ls) * lp[i * c + t[i]] - ls / double(c) * s);
  }
  test::check_close(r.loss, want, 1e-5, 1e-5, "composed");
}

TEST_CASE("cross_entropy_forward reads non-contiguous logits and targets") {
  const int64_t n = 5, c = 11;
  Tensor base = test::random({c, n}, DType::f32, 5, -3, 3);
  Tensor x = base.t();  // (n, c), transposed strides
  const std::vector<int64_t> t = {3, 0, -100, 10, 7};
  Tensor wide = ids({3, 99, 0, 99, -100, 99, 10, 99, 7, 99}).slice(0, 0, 10, 2);
  ops::CrossEntropyResult r = ops::cross_entropy_forward(x, wide, -100, 0.0);
  test::check_close(r.loss, reference(test::values(x), c, t, -100, 0.0).loss, 1e-5, 1e-6, "strided");
  Tensor d = ops::cross_entropy_backward(ones({n}), x, wide, r.lse);
  test::check_close(d, reference_grad(test::values(x), c, t, -100, 0.0, {1, 1, 1, 1, 1}, 1.0), 1e-5, 1e-6,
                    "strided grad");
}

TEST_CASE("cross_entropy_backward matches the analytic gradient in every dtype") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (int64_t c : {1, 7, 1000}) {
      for (double ls : {0.0, 0.3}) {
        CAPTURE(dt);
        CAPTURE(c);
        CAPTURE(ls);
        const int64_t n = 7;
        Tensor x = test::random({n, c}, dt, 11, -4, 4);
        const std::vector<int64_t> t = make_targets(n, c, -1, 12);
        ops::CrossEntropyResult r = ops::cross_entropy_forward(x, ids(t, DType::i32), -1, ls);
        const std::vector<double> xv = test::values(x);
        // Per-row upstream gradient (reduction none).
        Tensor g = test::random({n}, DType::f32, 13, 0.5, 2);
        Tensor d = ops::cross_entropy_backward(g, x, ids(t, DType::i32), r.lse, -1, ls);
        CHECK(d.dtype() == dt);
        CHECK(d.shape() == Shape{n, c});
        const double rtol = test::rtol_for(dt);
        test::check_close(d, test::rounded(reference_grad(xv, c, t, -1, ls, test::values(g), 1.0), dt), rtol,
                          dt == DType::f64 ? 1e-12 : rtol * 1e-2, "per-row grad");
        // One upstream value for every row, scaled (reduction mean).
        Tensor one = scalar_tensor(1.5, DType::f64);
        Tensor dm = ops::cross_entropy_backward(one, x, ids(t, DType::i32), r.lse, -1, ls, 1.0 / r.count.item());
        test::check_close(dm, test::rounded(reference_grad(xv, c, t, -1, ls, {1.5}, 1.0 / r.count.item()), dt),
                          rtol, dt == DType::f64 ? 1e-12 : rtol * 1e-2, "scaled grad");
        // The same scale from the forward's count tensor (what the mean reduction passes): bitwise.
        Tensor dc = ops::cross_entropy_backward(one, x, ids(t, DType::i32), r.lse, -1, ls, 1.0, r.count);
        CHECK(test::values(dc) == test::values(dm));
        Tensor dc2 = ops::cross_entropy_backward(one, x, ids(t, DType::i32), r.lse, -1, ls, 2.0, r.count);
        test::check_close(dc2, test::rounded(reference_grad(xv, c, t, -1, ls, {3.0}, 1.0 / r.count.item()), dt),
                          rtol, dt == DType::f64 ? 1e-12 : rtol * 1e-2, "scale times 1 / count");
      }
    }
  }
}

TEST_CASE("cross_entropy ops: the first C columns of padded rows, and a gradient padded with zeros") {
  for (DType dt : {DType::f32, DType::bf16}) {
    CAPTURE(dt);
    const int64_t n = 5, c = 9, padded = 16;
    Tensor wide = test::random({n, padded}, dt, 41, -4, 4);
    Tensor x = wide.narrow(1, 0, c), xc = x.contiguous();
    const std::vector<int64_t> t = make_targets(n, c, -1, 42);
    ops::CrossEntropyResult a = ops::cross_entropy_forward(x, ids(t), -1, 0.1);
    ops::CrossEntropyResult b = ops::cross_entropy_forward(xc, ids(t), -1, 0.1);
    CHECK(test::values(a.loss) == test::values(b.loss));
    Tensor g = test::random({n}, DType::f32, 43, 0.5, 2);
    Tensor d = ops::cross_entropy_backward(g, x, ids(t), a.lse, -1, 0.1, 1.0, {}, padded);
    Tensor want = ops::cross_entropy_backward(g, xc, ids(t), a.lse, -1, 0.1);
    REQUIRE(d.shape() == Shape{n, padded});
    CHECK(test::values(d.narrow(1, 0, c)) == test::values(want));
    CHECK(test::values(d.narrow(1, c, padded - c)) == std::vector<double>(n * (padded - c), 0.0));
    CHECK(ops::cross_entropy_backward(g, x, ids(t), a.lse, -1, 0.1, 1.0, {}, c).shape() == Shape{n, c});
    CHECK_ERROR_CONTAINS(ops::cross_entropy_backward(g, x, ids(t), a.lse, -1, 0.1, 1.0, {}, c - 1),
                         "cross_entropy_backward", "columns", "9", "8");
  }
}

TEST_CASE("cross_entropy_backward matches central finite differences of the forward in f64") {
  const int64_t n = 4, c = 5;
  const std::vector<int64_t> t = {2, 7, 0, 4};  // ignore_index 7
  for (double ls : {0.0, 0.25}) {
    CAPTURE(ls);
    Tensor x = test::random({n, c}, DType::f64, 21, -2, 2);
    const std::vector<double> w = {0.5, -1.0, 2.0, 1.25};
    auto objective = [&](const Tensor& xs) {
      std::vector<double> l = test::values(ops::cross_entropy_forward(xs, ids(t), 7, ls).loss);
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += w[i] * l[i];
      return s;
    };
    ops::CrossEntropyResult r = ops::cross_entropy_forward(x, ids(t), 7, ls);
    std::vector<double> d = test::values(ops::cross_entropy_backward(from_vector(w, {n}), x, ids(t), r.lse, 7, ls));
    std::vector<double> xv = test::values(x), fd;
    const double h = 1e-6;
    for (int64_t k = 0; k < n * c; ++k) {
      std::vector<double> hi = xv, lo = xv;
      hi[k] += h;
      lo[k] -= h;
      fd.push_back((objective(from_vector(hi, {n, c})) - objective(from_vector(lo, {n, c}))) / (2 * h));
    }
    test::check_close(d, fd, 1e-6, 1e-8, "finite differences");
  }
}

TEST_CASE("cross_entropy ops: -inf logits add nothing; a row of -inf is NaN; NaN stays in its row") {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = from_vector(std::vector<double>{-inf, 1.0, 2.0, -inf, 0.5, 0.5, -inf, -inf, -inf, 1.0, NAN, 0.0}, {4, 3})
                 .to(DType::f32);
  ops::CrossEntropyResult r = ops::cross_entropy_forward(x, ids({1, 2, 0, 2}), -100, 0.0);
  std::vector<double> loss = test::values(r.loss);
  CHECK(loss[0] == doctest::Approx(std::log(std::exp(1.0) + std::exp(2.0)) - 1.0).epsilon(1e-6));
  CHECK(loss[1] == doctest::Approx(std::log(2.0)).epsilon(1e-6));
  CHECK(std::isnan(loss[2]));
  CHECK(std::isnan(loss[3]));
  std::vector<double> d = test::values(ops::cross_entropy_backward(ones({4}), x, ids({1, 2, 0, 2}), r.lse));
  CHECK(std::fabs(d[0]) < 1e-30);  // exp(-inf - lse)
  CHECK(std::fabs(d[3]) < 1e-30);
  CHECK(d[1] == doctest::Approx(std::exp(1.0) / (std::exp(1.0) + std::exp(2.0)) - 1.0).epsilon(1e-6));
}

TEST_CASE("cross_entropy ops: all rows ignored, empty batches") {
  Tensor x = test::random({3, 4}, DType::f32, 31);
  ops::CrossEntropyResult r = ops::cross_entropy_forward(x, ids({-100, -100, -100}));
  CHECK(r.count.item() == 0);
  CHECK(test::values(r.loss) == std::vector<double>(3, 0.0));
  // scale = 1 / 0 for a mean over no rows: ignored rows still get a zero gradient.
  Tensor d = ops::cross_entropy_backward(scalar_tensor(1.0), x, ids({-100, -100, -100}), r.lse, -100, 0.0, INFINITY);
  CHECK(test::values(d) == std::vector<double>(12, 0.0));
  ops::CrossEntropyResult e = ops::cross_entropy_forward(empty({0, 5}), empty({0}, DType::i64));
  CHECK(e.loss.shape() == Shape{0});
  CHECK(e.count.item() == 0);
  CHECK(ops::cross_entropy_backward(empty({0}), empty({0, 5}), empty({0}, DType::i64), e.lse).shape() == Shape{0, 5});
}

TEST_CASE("cross_entropy ops: bad targets, shapes and dtypes are errors naming the values") {
  Tensor x = test::random({3, 4}, DType::f32, 41);
  CHECK_ERROR_CONTAINS(ops::cross_entropy_forward(x, ids({0, 4, 1})), "cross_entropy", "target 4", "row 1",
                       "4 classes");
  CHECK_ERROR_CONTAINS(ops::cross_entropy_forward(x, ids({0, 1, -2}, DType::i32)), "target -2", "row 2");
  CHECK_ERROR_CONTAINS(ops::cross_entropy_forward(x, ids({0, 1})), "cross_entropy", "[2]", "[3, 4]");
  CHECK_ERROR_CONTAINS(ops::cross_entropy_forward(x.view({12}), ids({0})), "cross_entropy", "(N, C)", "[12]");
  CHECK_ERROR_CONTAINS(ops::cross_entropy_forward(x, ids({0, 1, 2}).to(DType::f32)), "targets", "f32");
  CHECK_ERROR_CONTAINS(ops::cross_entropy_forward(arange(12).view({3, 4}), ids({0, 1, 2})), "logits", "i64");
  CHECK_ERROR_CONTAINS(ops::cross_entropy_forward(x, ids({0, 1, 2}), -100, -0.5), "label_smoothing", "-0.5");
  ops::CrossEntropyResult r = ops::cross_entropy_forward(x, ids({0, 1, 2}));
  CHECK_ERROR_CONTAINS(ops::cross_entropy_backward(ones({2}), x, ids({0, 1, 2}), r.lse), "cross_entropy_backward",
                       "grad_loss", "[2]");
  CHECK_ERROR_CONTAINS(ops::cross_entropy_backward(ones({3}), x, ids({0, 1, 2}), ones({4})), "lse", "[4]");
  CHECK_ERROR_CONTAINS(ops::cross_entropy_backward(ones({3}), x, ids({0, 9, 2}), r.lse), "target 9", "row 1");
  CHECK_ERROR_CONTAINS(ops::cross_entropy_backward(ones({3}), x, ids({0, 1, 2}), r.lse, -100, 0.0, 1.0, ones({})),
                       "count", "i64");
}
