// softmax / log_softmax and their backward kernels against double loops: every floating dtype,
// every dim (the last-dim row path and the column path), non-contiguous inputs, extreme values,
// thread-count invariance and error messages.
#include <cstring>
#include <limits>

#include "test_util.h"

using namespace kiln;
using kiln::test::at;

namespace {

const std::vector<DType> kFloating = {DType::f32, DType::f64, DType::bf16, DType::f16};

// The flat (row-major) positions of each line along `dim`, one vector per line.
std::vector<std::vector<int64_t>> lines(const Shape& shape, int64_t dim) {
  std::vector<std::vector<int64_t>> out;
  Shape outer = shape;
  outer[dim] = 1;
  Strides st = contiguous_strides(shape);
  test::for_each_index(outer, [&](const std::vector<int64_t>& idx) {
    int64_t base = 0;
    for (size_t d = 0; d < idx.size(); ++d) base += idx[d] * st[d];
    std::vector<int64_t> line;
    for (int64_t k = 0; k < shape[dim]; ++k) line.push_back(base + k * st[dim]);
    out.push_back(line);
  });
  return out;
}

std::vector<double> ref_softmax(const std::vector<double>& x, const Shape& shape, int64_t dim, bool log) {
  std::vector<double> y(x.size());
  for (const auto& line : lines(shape, dim)) {
    double m = -INFINITY, s = 0;
    for (int64_t k : line) m = std::max(m, x[k]);
    for (int64_t k : line) s += std::exp(x[k] - m);
    for (int64_t k : line) y[k] = log ? x[k] - m - std::log(s) : std::exp(x[k] - m) / s;
  }
  return y;
}

std::vector<double> ref_backward(const std::vector<double>& g, const std::vector<double>& y, const Shape& shape,
                                 int64_t dim, bool log) {
  std::vector<double> gi(g.size());
  for (const auto& line : lines(shape, dim)) {
    double s = 0;
    for (int64_t k : line) s += log ? g[k] : g[k] * y[k];
    for (int64_t k : line) gi[k] = log ? g[k] - std::exp(y[k]) * s : y[k] * (g[k] - s);
  }
  return gi;
}

std::vector<std::pair<std::string, Tensor>> layouts(DType dt) {
  return {{"contiguous", test::random({3, 5, 7}, dt, 1, -4, 4)},
          {"transposed", test::random({7, 5, 3}, dt, 2, -4, 4).transpose(0, 2)},
          {"stepped slice", test::random({3, 10, 7}, dt, 3, -4, 4).slice(1, 1, 10, 2)},
          {"expanded", test::random({3, 1, 7}, dt, 4, -4, 4).expand({3, 5, 7})}};
}

}  // namespace

TEST_CASE("softmax and log_softmax match double loops for every dim, layout and dtype") {
  for (DType dt : kFloating) {
    double rtol = test::rtol_for(dt);
    for (auto& [name, x] : layouts(dt)) {
      auto xv = test::values(x);
      for (int64_t dim : {0, 1, 2, -1, -2}) {
        int64_t d = dim < 0 ? dim + 3 : dim;
        std::string what = std::string(dtype_name(dt)) + " " + name + " dim " + std::to_string(dim);
        Tensor y = ops::softmax(x, dim);
        CHECK(y.shape() == x.shape());
        CHECK(y.dtype() == dt);
        CHECK(y.is_contiguous());
        test::check_close(y, ref_softmax(xv, x.shape(), d, false), rtol, rtol * 1e-2, what + " softmax");
        test::check_close(ops::log_softmax(x, dim), ref_softmax(xv, x.shape(), d, true), rtol, rtol * 8,
                          what + " log_softmax");
      }
    }
  }
}

TEST_CASE("long rows: softmax rows sum to one and match the reference; large values do not overflow") {
  for (DType dt : kFloating) {
    Tensor x = test::random({6, 1000}, dt, 9, -30, 30);
    auto y = test::values(ops::softmax(x, -1));
    test::check_close(y, ref_softmax(test::values(x), x.shape(), 1, false), test::rtol_for(dt), 1e-7,
                      dtype_name(dt));
    for (int r = 0; r < 6; ++r) {
      double s = 0;
      for (int k = 0; k < 1000; ++k) s += y[r * 1000 + k];
      CHECK(s == doctest::Approx(1.0).epsilon(dt == DType::bf16 ? 2e-2 : 1e-3));
    }
  }
  Tensor big = from_vector<float>({1000, 1001, 1002, -1000}, {1, 4});
  auto y = test::values(ops::softmax(big, 1));
  test::check_close(y, ref_softmax(test::values(big), big.shape(), 1, false), 1e-5, 1e-12, "big");
  auto ly = test::values(ops::log_softmax(big, 1));
  CHECK(ly[3] == doctest::Approx(-2002.4076).epsilon(1e-6));
  Tensor down = from_vector<double>({1000, -5, 1001, 3}, {2, 2});  // column path
  test::check_close(ops::softmax(down, 0), ref_softmax(test::values(down), down.shape(), 0, false), 1e-12, 0, "col");
}

TEST_CASE("NaN in a row makes the row NaN; other rows are unaffected") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = from_vector<float>({1, nan, 2, 0, 1, 2}, {2, 3});
  auto y = test::values(ops::softmax(x, 1));
  for (int k = 0; k < 3; ++k) CHECK(std::isnan(y[k]));
  CHECK(y[5] == doctest::Approx(0.66524096));
  auto c = test::values(ops::softmax(x, 0));
  CHECK(std::isnan(c[1]));
  CHECK(std::isnan(c[4]));
  CHECK(c[0] == doctest::Approx(0.7310586));
}

TEST_CASE("backward kernels match the analytic formula and finite differences") {
  for (DType dt : kFloating) {
    double rtol = test::rtol_for(dt) * 4;
    for (auto& [name, x] : layouts(dt)) {
      Tensor g = test::random(x.shape(), dt, 17);
      auto gv = test::values(g);
      for (int64_t dim : {0, 1, -1}) {
        int64_t d = dim < 0 ? dim + 3 : dim;
        std::string what = std::string(dtype_name(dt)) + " " + name + " dim " + std::to_string(dim);
        for (bool log : {false, true}) {
          Tensor y = log ? ops::log_softmax(x, dim) : ops::softmax(x, dim);
          Tensor yt = y.transpose(0, 2).contiguous().transpose(0, 2);  // a non-contiguous `out`
          Tensor gi = log ? ops::log_softmax_backward(g, yt, dim) : ops::softmax_backward(g, yt, dim);
          CHECK(gi.dtype() == dt);
          // Scale of the terms: |g| <= 2, so allow an absolute slack of a few ulps of 2.
          test::check_close(gi, ref_backward(gv, test::values(y), x.shape(), d, log), rtol, rtol * 4,
                            what + (log ? " log_softmax_backward" : " softmax_backward"));
        }
      }
    }
  }
  // Finite differences in f64 of L = sum(g * f(x)) for f = softmax and log_softmax, dim 1 of (3, 4).
  Tensor x = test::random({3, 4}, DType::f64, 5);
  Tensor g = test::random({3, 4}, DType::f64, 6);
  for (bool log : {false, true}) {
    auto f = [&](const Tensor& in) { return log ? ops::log_softmax(in, 1) : ops::softmax(in, 1); };
    auto loss = [&](const Tensor& in) { return ops::sum(ops::mul(f(in), g)).item(); };
    Tensor y = f(x);
    auto gi = test::values(log ? ops::log_softmax_backward(g, y, 1) : ops::softmax_backward(g, y, 1));
    std::vector<double> fd;
    const double h = 1e-6;
    for (int64_t k = 0; k < 12; ++k) {
      Tensor xp = x.clone(), xm = x.clone();
      xp.data<double>()[k] += h;
      xm.data<double>()[k] -= h;
      fd.push_back((loss(xp) - loss(xm)) / (2 * h));
    }
    test::check_close(gi, fd, 1e-6, 1e-8, log ? "log_softmax fd" : "softmax fd");
  }
}

TEST_CASE("results do not depend on the thread count") {
  int saved = num_threads();
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor x = test::random({64, 700}, dt, 8);
    Tensor g = test::random({64, 700}, dt, 9);
    for (int64_t dim : {0, 1}) {
      set_num_threads(1);
      Tensor a = ops::softmax(x, dim), la = ops::log_softmax(x, dim), ba = ops::softmax_backward(g, a, dim);
      set_num_threads(2);
      Tensor b = ops::softmax(x, dim), lb = ops::log_softmax(x, dim), bb = ops::softmax_backward(g, a, dim);
      CHECK(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
      CHECK(std::memcmp(la.data_ptr(), lb.data_ptr(), la.nbytes()) == 0);
      CHECK(std::memcmp(ba.data_ptr(), bb.data_ptr(), ba.nbytes()) == 0);
    }
  }
  set_num_threads(saved);
}

TEST_CASE("bad arguments name the op and the values") {
  Tensor x = test::random({2, 3});
  CHECK_ERROR_CONTAINS(ops::softmax(x.to(DType::i64), 1), "softmax", "i64");
  CHECK_ERROR_CONTAINS(ops::log_softmax(x, 2), "log_softmax", "dim 2", "out of range");
  CHECK_ERROR_CONTAINS(ops::softmax(x, -3), "softmax", "-3");
  CHECK_ERROR_CONTAINS(ops::softmax_backward(x, test::random({3, 2}), 1), "softmax_backward", "[2, 3]", "[3, 2]");
  CHECK_ERROR_CONTAINS(ops::log_softmax_backward(x, x.to(DType::f64), 1), "log_softmax_backward", "f32", "f64");
}
