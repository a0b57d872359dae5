// layer_norm and layer_norm_backward against double loops and finite differences: every floating
// dtype, with and without weight / bias, multi-dim normalized shapes, non-contiguous inputs,
// thread-count invariance and shape-mismatch messages.
#include <cstring>

#include "test_util.h"

using namespace kiln;

namespace {

struct Ref {
  std::vector<double> out, mean, rstd, gx, gw, gb;
};

// Plain double layer norm over rows of n values (x, g in row-major order), forward and backward.
Ref reference(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
              const std::vector<double>& g, int64_t n, double eps) {
  Ref r;
  int64_t rows = int64_t(x.size()) / n;
  r.gw.assign(n, 0.0);
  r.gb.assign(n, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < n; ++j) m += x[i * n + j];
    m /= double(n);
    for (int64_t j = 0; j < n; ++j) v += (x[i * n + j] - m) * (x[i * n + j] - m);
    v /= double(n);
    double rs = 1.0 / std::sqrt(v + eps);
    r.mean.push_back(m);
    r.rstd.push_back(rs);
    std::vector<double> xh(n), gw(n);
    double a = 0, c = 0;
    for (int64_t j = 0; j < n; ++j) {
      xh[j] = (x[i * n + j] - m) * rs;
      r.out.push_back(xh[j] * (w.empty() ? 1.0 : w[j]) + (b.empty() ? 0.0 : b[j]));
      gw[j] = g[i * n + j] * (w.empty() ? 1.0 : w[j]);
      a += gw[j];
      c += gw[j] * xh[j];
      r.gw[j] += g[i * n + j] * xh[j];
      r.gb[j] += g[i * n + j];
    }
    for (int64_t j = 0; j < n; ++j) r.gx.push_back(rs * (gw[j] - a / double(n) - xh[j] * c / double(n)));
  }
  return r;
}

}  // namespace

TEST_CASE("layer_norm forward and backward match double loops") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    double rtol = test::rtol_for(dt);
    // Stats dtypes follow torch: f64 for f64 input, f32 otherwise.
    DType sdt = dt == DType::f64 ? DType::f64 : DType::f32;
    struct Case { std::string name; Tensor x; Shape ns; };
    std::vector<Case> cases = {
        {"contiguous", test::random({6, 40}, dt, 1, -3, 5), {40}},
        {"2-d normalized", test::random({3, 4, 5, 6}, dt, 2), {5, 6}},
        {"transposed", test::random({40, 6}, dt, 3).t(), {40}},
        {"stepped slice", test::random({5, 3, 70}, dt, 4).slice(2, 0, 70, 2), {3, 35}},
        {"expanded", test::random({1, 33}, dt, 5).expand({4, 33}), {33}}};
    for (auto& c : cases) {
      int64_t n = shape_numel(c.ns);
      for (int mode = 0; mode < 3; ++mode) {  // 0: weight and bias, 1: weight only, 2: neither
        std::string what = std::string(dtype_name(dt)) + " " + c.name + " mode " + std::to_string(mode);
        CAPTURE(what);
        Tensor w = mode < 2 ? test::random(c.ns, dt, 10, 0.5, 1.5) : Tensor();
        Tensor b = mode == 0 ? test::random(c.ns, dt, 11) : Tensor();
        Tensor g = test::random(c.x.shape(), dt, 12);
        Ref ref = reference(test::values(c.x), w.defined() ? test::values(w) : std::vector<double>{},
                            b.defined() ? test::values(b) : std::vector<double>{}, test::values(g), n, 1e-5);
        auto r = ops::layer_norm(c.x, c.ns, w, b);
        CHECK(r.out.shape() == c.x.shape());
        CHECK(r.out.dtype() == dt);
        CHECK(r.mean.shape() == Shape{c.x.numel() / n});
        CHECK(r.mean.dtype() == sdt);
        CHECK(r.rstd.dtype() == sdt);
        test::check_close(r.out, ref.out, rtol, rtol * 4, what + " out");
        test::check_close(r.mean, ref.mean, 1e-6, 1e-7, what + " mean");
        test::check_close(r.rstd, ref.rstd, 1e-6, 0, what + " rstd");

        auto gr = ops::layer_norm_backward(g, c.x, r.mean, r.rstd, w, c.ns, b.defined());
        CHECK(gr.grad_x.shape() == c.x.shape());
        CHECK(gr.grad_weight.defined() == w.defined());
        CHECK(gr.grad_bias.defined() == b.defined());
        // grad_x cancels terms of size ~|g| * rstd; judge it against that scale.
        test::check_close(gr.grad_x, ref.gx, rtol * 4, rtol * 8 * ref.rstd[0], what + " grad_x");
        if (w.defined()) test::check_close(gr.grad_weight, ref.gw, rtol * 4, rtol * 4 * double(ref.mean.size()), what + " grad_weight");
        if (b.defined()) test::check_close(gr.grad_bias, ref.gb, rtol * 4, rtol * 4 * double(ref.mean.size()), what + " grad_bias");
      }
    }
  }
}

TEST_CASE("layer_norm_backward matches finite differences in f64") {
  Tensor x = test::random({3, 2, 4}, DType::f64, 21);
  Tensor w = test::random({2, 4}, DType::f64, 22, 0.5, 1.5);
  Tensor b = test::random({2, 4}, DType::f64, 23);
  Tensor g = test::random({3, 2, 4}, DType::f64, 24);
  Shape ns{2, 4};
  auto loss = [&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
    return ops::sum(ops::mul(ops::layer_norm(xi, ns, wi, bi).out, g)).item();
  };
  auto fd = [&](Tensor& t) {  // central differences of loss with respect to every element of t
    std::vector<double> out;
    const double h = 1e-6;
    for (int64_t k = 0; k < t.numel(); ++k) {
      double saved = t.data<double>()[k];
      t.data<double>()[k] = saved + h;
      double up = loss(x, w, b);
      t.data<double>()[k] = saved - h;
      double down = loss(x, w, b);
      t.data<double>()[k] = saved;
      out.push_back((up - down) / (2 * h));
    }
    return out;
  };
  auto r = ops::layer_norm(x, ns, w, b);
  auto gr = ops::layer_norm_backward(g, x, r.mean, r.rstd, w, ns);
  test::check_close(gr.grad_x, fd(x), 1e-6, 1e-8, "grad_x");
  test::check_close(gr.grad_weight, fd(w), 1e-6, 1e-8, "grad_weight");
  test::check_close(gr.grad_bias, fd(b), 1e-6, 1e-8, "grad_bias");
}

TEST_CASE("layer_norm results do not depend on the thread count") {
  int saved = num_threads();
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor x = test::random({3000, 24}, dt, 31);
    Tensor w = test::random({24}, dt, 32);
    Tensor b = test::random({24}, dt, 33);
    Tensor g = test::random({3000, 24}, dt, 34);
    set_num_threads(1);
    auto r1 = ops::layer_norm(x, {24}, w, b);
    auto g1 = ops::layer_norm_backward(g, x, r1.mean, r1.rstd, w, {24});
    set_num_threads(2);
    auto r2 = ops::layer_norm(x, {24}, w, b);
    auto g2 = ops::layer_norm_backward(g, x, r2.mean, r2.rstd, w, {24});
    auto same = [](const Tensor& a, const Tensor& c) { return std::memcmp(a.data_ptr(), c.data_ptr(), a.nbytes()) == 0; };
    CHECK(same(r1.out, r2.out));
    CHECK(same(r1.rstd, r2.rstd));
    CHECK(same(g1.grad_x, g2.grad_x));
    CHECK(same(g1.grad_weight, g2.grad_weight));
    CHECK(same(g1.grad_bias, g2.grad_bias));
  }
  set_num_threads(saved);
}

TEST_CASE("shape mismatches name both shapes") {
  Tensor x = test::random({2, 3, 4});
  CHECK_ERROR_CONTAINS(ops::layer_norm(x, {3}, Tensor(), Tensor()), "layer_norm", "[3]", "[2, 3, 4]");
  CHECK_ERROR_CONTAINS(ops::layer_norm(x, {2, 3, 4, 5}, Tensor(), Tensor()), "[2, 3, 4, 5]", "[2, 3, 4]");
  CHECK_ERROR_CONTAINS(ops::layer_norm(x, {4}, test::random({5}), Tensor()), "weight", "[5]", "[4]");
  CHECK_ERROR_CONTAINS(ops::layer_norm(x, {3, 4}, Tensor(), test::random({4})), "bias", "[4]", "[3, 4]");
  CHECK_ERROR_CONTAINS(ops::layer_norm(x.to(DType::i32), {4}, Tensor(), Tensor()), "layer_norm", "i32");
  auto r = ops::layer_norm(x, {4}, Tensor(), Tensor());
  CHECK_ERROR_CONTAINS(ops::layer_norm_backward(test::random({2, 3, 5}), x, r.mean, r.rstd, Tensor(), {4}),
                       "layer_norm_backward", "[2, 3, 5]", "[2, 3, 4]");
  CHECK_ERROR_CONTAINS(ops::layer_norm_backward(x, x, r.mean, r.rstd, Tensor(), {3, 4}), "mean", "6 elements", "2 rows");
}
