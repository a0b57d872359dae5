// max / avg / adaptive-avg pooling and their backward kernels against plain double loops over
// test::at: every floating dtype, strides, padding, dilation, strided and 3-D inputs, NaN windows,
// adjoint identities, thread independence and the error messages.
#include "test_util.h"

#include <cmath>
#include <limits>

using namespace kiln;
using kiln::test::at;

namespace {

const DType kFloating[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

struct Pool {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

// (planes, H, W) view of the index space of an (N, C, H, W) or (C, H, W) tensor.
std::vector<int64_t> index_of(const Tensor& t, int64_t plane, int64_t y, int64_t x) {
  if (t.dim() == 3) return {plane, y, x};
  return {plane / t.shape()[1], plane % t.shape()[1], y, x};
}

struct MaxRef {
  std::vector<double> value, grad;
  std::vector<int64_t> index;
};

// Max over the window in row-major order; the first maximum wins, a NaN is the max (the last NaN).
MaxRef reference_max(const Tensor& x, const Pool& p, const Tensor& g) {
  const int64_t h = x.shape()[x.dim() - 2], w = x.shape()[x.dim() - 1], planes = x.numel() / (h * w);
  const int64_t oh = (h + 2 * p.ph - p.dh * (p.kh - 1) - 1) / p.sh + 1;
  const int64_t ow = (w + 2 * p.pw - p.dw * (p.kw - 1) - 1) / p.sw + 1;
  MaxRef r;
  r.grad.assign(x.numel(), 0.0);
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t arg = -1;
        bool nan = false;
        for (int64_t i = 0; i < p.kh; ++i)
          for (int64_t j = 0; j < p.kw; ++j) {
            const int64_t iy = oy * p.sh - p.ph + i * p.dh, ix = ox * p.sw - p.pw + j * p.dw;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const double v = at(x, index_of(x, pl, iy, ix));
            if (std::isnan(v)) {
              nan = true;
              best = v;
              arg = iy * w + ix;
            } else if (!nan && (arg < 0 || v > best)) {
              best = v;
              arg = iy * w + ix;
            }
          }
        r.value.push_back(best);
        r.index.push_back(arg);
        if (g.defined()) r.grad[pl * h * w + arg] += at(g, index_of(g, pl, oy, ox));
      }
  return r;
}

// Average with the padding counted in the divisor; also the backward scatter of g.
std::pair<std::vector<double>, std::vector<double>> reference_avg(const Tensor& x, const Pool& p, const Tensor& g) {
  const int64_t h = x.shape()[x.dim() - 2], w = x.shape()[x.dim() - 1], planes = x.numel() / (h * w);
  const int64_t oh = (h + 2 * p.ph - p.kh) / p.sh + 1, ow = (w + 2 * p.pw - p.kw) / p.sw + 1;
  std::vector<double> out, grad(x.numel(), 0.0);
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        double sum = 0;
        for (int64_t i = 0; i < p.kh; ++i)
          for (int64_t j = 0; j < p.kw; ++j) {
            const int64_t iy = oy * p.sh - p.ph + i, ix = ox * p.sw - p.pw + j;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            sum += at(x, index_of(x, pl, iy, ix));
            grad[pl * h * w + iy * w + ix] += at(g, index_of(g, pl, oy, ox)) / double(p.kh * p.kw);
          }
        out.push_back(sum / double(p.kh * p.kw));
      }
  return {out, grad};
}

std::pair<std::vector<double>, std::vector<double>> reference_adaptive(const Tensor& x, int64_t oh, int64_t ow,
                                                                       const Tensor& g) {
  const int64_t h = x.shape()[x.dim() - 2], w = x.shape()[x.dim() - 1], planes = x.numel() / (h * w);
  std::vector<double> out, grad(x.numel(), 0.0);
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t y0 = int64_t(std::floor(double(oy * h) / oh)), y1 = int64_t(std::ceil(double((oy + 1) * h) / oh));
        const int64_t x0 = int64_t(std::floor(double(ox * w) / ow)), x1 = int64_t(std::ceil(double((ox + 1) * w) / ow));
        const double count = double((y1 - y0) * (x1 - x0));
        double sum = 0;
        for (int64_t iy = y0; iy < y1; ++iy)
          for (int64_t ix = x0; ix < x1; ++ix) {
            sum += at(x, index_of(x, pl, iy, ix));
            grad[pl * h * w + iy * w + ix] += at(g, index_of(g, pl, oy, ox)) / count;
          }
        out.push_back(sum / count);
      }
  return {out, grad};
}

// The 16-bit outputs are rounded once from a float sum; the references are exact.
double tol(DType dt) { return test::rtol_for(dt); }

// Output k of the pool `r` is `value` (NaN: is NaN) and its index is `index` (the flat input position).
void check_output(const ops::MaxPool2dResult& r, int64_t k, double value, int64_t index) {
  CAPTURE(k);
  const double v = test::values(r.out)[k];
  if (std::isnan(value)) CHECK(std::isnan(v));
  else CHECK(v == value);
  CHECK(test::values(r.indices)[k] == index);
}

}  // namespace

TEST_CASE("max_pool2d and its backward match the loop reference") {
  const std::pair<Pool, Shape> cases[] = {
      {{2, 2, 2, 2, 0, 0, 1, 1}, {2, 3, 8, 8}},  {{3, 3, 2, 2, 1, 1, 1, 1}, {2, 3, 7, 9}},
      {{3, 2, 1, 2, 1, 0, 2, 1}, {1, 2, 9, 7}},  {{2, 3, 3, 1, 1, 1, 1, 2}, {3, 33, 7}},
      {{1, 1, 1, 1, 0, 0, 1, 1}, {1, 1, 5, 4}},  {{2, 2, 2, 2, 0, 0, 1, 1}, {2, 3, 7, 9}},  // odd: last row/column unused
      {{2, 2, 2, 2, 0, 0, 1, 1}, {2, 3, 6, 42}},  // 21 outputs a row: 16 at once (AVX-512) and a tail
  };
  uint64_t seed = 1;
  for (DType dt : kFloating)
    for (const auto& [p, shape] : cases) {
      Tensor x = test::random(shape, dt, seed++);
      auto r = ops::max_pool2d(x, {p.kh, p.kw}, ops::Size2{p.sh, p.sw}, {p.ph, p.pw}, {p.dh, p.dw});
      CHECK(r.indices.dtype() == DType::i64);
      Tensor g = test::random(r.out.shape(), dt, seed++);
      MaxRef ref = reference_max(x, p, g);
      const std::string what = detail::str_cat(dt, " ", shape, " kernel ", p.kh, "x", p.kw);
      test::check_close(r.out, ref.value, 0, 0, what + " values");  // a max is exact
      std::vector<double> idx(ref.index.begin(), ref.index.end());
      test::check_close(r.indices, idx, 0, 0, what + " indices");
      test::check_close(ops::max_pool2d_backward(g, r.indices, shape), ref.grad, tol(dt), 0, what + " backward");
    }
}

TEST_CASE("max_pool2d: default stride, strided input, NaN windows") {
  Tensor x = test::random({2, 6, 6, 3}, DType::f32, 7).permute({0, 3, 1, 2});  // (2, 3, 6, 6) channels last
  auto r = ops::max_pool2d(x, 2);
  REQUIRE(r.out.shape() == Shape{2, 3, 3, 3});
  test::check_close(r.out, reference_max(x, {2, 2, 2, 2, 0, 0, 1, 1}, Tensor()).value, 0, 0, "strided");

  Tensor y = test::random({1, 1, 4, 4}, DType::f32, 8);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float* p = y.data<float>();
  p[1 * 4 + 0] = nan;  // window (0, 0)
  p[0 * 4 + 3] = nan;  // window (0, 1): two NaNs, torch reports the last
  p[1 * 4 + 2] = nan;
  p[3 * 4 + 3] = 100.f;  // window (1, 1): an ordinary max
  auto rn = ops::max_pool2d(y, 2);
  check_output(rn, 0, nan, 4);
  check_output(rn, 1, nan, 6);
  CHECK(!std::isnan(test::values(rn.out)[2]));
  check_output(rn, 3, 100.0, 15);

  // The same windows in a row of 20 outputs (the 16-wide AVX-512 path of the 2x2 pool).
  Tensor z = test::random({1, 1, 2, 40}, DType::f32, 9);
  float* q = z.data<float>();
  q[40 + 0] = nan;                 // window 0
  q[3] = nan, q[40 + 2] = nan;     // window 1: the last NaN
  q[40 + 7] = 100.f;               // window 3
  q[40 + 39] = nan;                // window 19 (the scalar tail)
  auto rz = ops::max_pool2d(z, 2);
  check_output(rz, 0, nan, 40);
  check_output(rz, 1, nan, 42);
  check_output(rz, 3, 100.0, 47);
  check_output(rz, 19, nan, 79);
  test::check_close(rz.out, reference_max(z, {2, 2, 2, 2, 0, 0, 1, 1}, Tensor()).value, 0, 0, "wide row with NaNs");
}

TEST_CASE("avg_pool2d and its backward match the loop reference") {
  const std::pair<Pool, Shape> cases[] = {
      {{2, 2, 2, 2, 0, 0, 1, 1}, {2, 3, 8, 8}},
      {{3, 3, 2, 2, 1, 1, 1, 1}, {2, 3, 7, 9}},
      {{3, 2, 1, 3, 1, 1, 1, 1}, {3, 33, 7}},
      {{4, 4, 4, 4, 0, 0, 1, 1}, {2, 2, 4, 4}},
  };
  uint64_t seed = 20;
  for (DType dt : kFloating)
    for (const auto& [p, shape] : cases) {
      Tensor x = test::random(shape, dt, seed++);
      Tensor y = ops::avg_pool2d(x, {p.kh, p.kw}, ops::Size2{p.sh, p.sw}, {p.ph, p.pw});
      Tensor g = test::random(y.shape(), dt, seed++);
      auto [out, grad] = reference_avg(x, p, g);
      const std::string what = detail::str_cat(dt, " ", shape, " kernel ", p.kh, "x", p.kw);
      test::check_close(y, out, tol(dt), tol(dt), what);
      test::check_close(ops::avg_pool2d_backward(g, shape, {p.kh, p.kw}, ops::Size2{p.sh, p.sw}, {p.ph, p.pw}), grad,
                        tol(dt), tol(dt), what + " backward");
    }
  Tensor xs = test::random({2, 7, 7, 3}, DType::f64, 9).permute({0, 3, 1, 2});
  test::check_close(ops::avg_pool2d(xs, 3, 2, 1), reference_avg(xs, {3, 3, 2, 2, 1, 1, 1, 1}, xs).first, 1e-12, 0,
                    "strided input");
}

TEST_CASE("adaptive_avg_pool2d and its backward match the loop reference") {
  const std::pair<Shape, ops::Size2> cases[] = {
      {{2, 3, 7, 9}, {3, 4}}, {{2, 3, 8, 8}, {1, 1}}, {{3, 5, 5}, {5, 5}}, {{1, 2, 3, 4}, {5, 7}}, {{2, 1, 33, 7}, {4, 3}},
  };
  uint64_t seed = 40;
  for (DType dt : kFloating)
    for (const auto& [shape, out_hw] : cases) {
      Tensor x = test::random(shape, dt, seed++);
      Tensor y = ops::adaptive_avg_pool2d(x, out_hw);
      Tensor g = test::random(y.shape(), dt, seed++);
      auto [out, grad] = reference_adaptive(x, out_hw.h, out_hw.w, g);
      const std::string what = detail::str_cat(dt, " ", shape, " -> ", out_hw);
      test::check_close(y, out, tol(dt), tol(dt), what);
      test::check_close(ops::adaptive_avg_pool2d_backward(g, shape), grad, tol(dt), tol(dt), what + " backward");
    }
}

TEST_CASE("pooling backward kernels are adjoints; results do not depend on the thread count") {
  Tensor x = test::random({4, 8, 11, 10}, DType::f64, 60);
  Tensor ga = test::random({4, 8, 6, 5}, DType::f64, 61);
  auto dot = [](const Tensor& a, const Tensor& b) {
    auto va = test::values(a), vb = test::values(b);
    double s = 0;
    for (size_t i = 0; i < va.size(); ++i) s += va[i] * vb[i];
    return s;
  };
  CHECK(dot(ops::avg_pool2d(x, 3, 2, 1), ga) ==
        doctest::Approx(dot(x, ops::avg_pool2d_backward(ga, x.shape(), 3, 2, 1))).epsilon(1e-12));
  Tensor gb = test::random({4, 8, 3, 4}, DType::f64, 62);
  CHECK(dot(ops::adaptive_avg_pool2d(x, {3, 4}), gb) ==
        doctest::Approx(dot(x, ops::adaptive_avg_pool2d_backward(gb, x.shape()))).epsilon(1e-12));

  Tensor xf = test::random({64, 16, 12, 12}, DType::f32, 63);
  const int saved = num_threads();
  std::vector<double> runs[2];
  for (int t = 0; t < 2; ++t) {
    set_num_threads(t == 0 ? 1 : std::max(2, saved));
    auto m = ops::max_pool2d(xf, 3, 2, 1);
    Tensor a = ops::avg_pool2d(xf, 3, 2, 1);
    runs[t] = test::values(ops::max_pool2d_backward(m.out, m.indices, xf.shape()));
    for (double v : test::values(ops::avg_pool2d_backward(a, xf.shape(), 3, 2, 1))) runs[t].push_back(v);
  }
  set_num_threads(saved);
  CHECK(runs[0] == runs[1]);
}

TEST_CASE("bad pooling arguments name the values") {
  Tensor x = test::random({2, 3, 8, 8});
  CHECK_ERROR_CONTAINS(ops::max_pool2d(x, 3, 1, 2), "max_pool2d", "padding (2, 2)", "half the kernel (3, 3)");
  CHECK_ERROR_CONTAINS(ops::max_pool2d(x, 9), "max_pool2d", "larger than the padded input", "(8, 8)");
  CHECK_ERROR_CONTAINS(ops::max_pool2d(test::random({8, 8}), 2), "max_pool2d", "[8, 8]");
  CHECK_ERROR_CONTAINS(ops::max_pool2d(x.to(DType::i32), 2), "max_pool2d", "i32");
  CHECK_ERROR_CONTAINS(ops::avg_pool2d(x, 2, 0), "avg_pool2d", "stride", "(0, 0)");
  CHECK_ERROR_CONTAINS(ops::avg_pool2d_backward(test::random({2, 3, 3, 3}), x.shape(), 2), "avg_pool2d_backward",
                       "[2, 3, 3, 3]", "[2, 3, 4, 4]");
  CHECK_ERROR_CONTAINS(ops::adaptive_avg_pool2d(x, {0, 2}), "adaptive_avg_pool2d", "(0, 2)");
  auto r = ops::max_pool2d(x, 2);
  Tensor bad = r.indices.clone();
  bad.data<int64_t>()[3] = 64;
  CHECK_ERROR_CONTAINS(ops::max_pool2d_backward(r.out, bad, x.shape()), "index 64", "8 x 8");
  CHECK_ERROR_CONTAINS(ops::max_pool2d_backward(r.out, r.indices.to(DType::i32), x.shape()), "i64", "i32");
}
