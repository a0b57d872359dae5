// Reductions against plain double loops: every dtype, negative and multiple dims, keepdim,
// non-contiguous inputs (transposed, stepped slices, expanded), NaN handling, thread-count
// invariance and error messages.
#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "test_util.h"

using namespace kiln;
using kiln::test::at;

namespace {

const std::vector<DType> kFloating = {DType::f32, DType::f64, DType::bf16, DType::f16};

// The input's values grouped by output position (row-major over the kept dims); inside a group the
// values follow the reduced dims in row-major order.
std::vector<std::vector<double>> groups(const Tensor& x, const std::vector<int64_t>& dims) {
  const int64_t nd = x.dim();
  std::set<int64_t> red;
  for (int64_t d : dims) red.insert(d < 0 ? d + nd : d);
  if (dims.empty())
    for (int64_t d = 0; d < nd; ++d) red.insert(d);
  int64_t nout = 1;
  for (int64_t d = 0; d < nd; ++d)
    if (!red.count(d)) nout *= x.size(d);
  std::vector<std::vector<double>> g(static_cast<size_t>(nout));
  test::for_each_index(x.shape(), [&](const std::vector<int64_t>& idx) {
    int64_t k = 0;
    for (int64_t d = 0; d < nd; ++d)
      if (!red.count(d)) k = k * x.size(d) + idx[d];
    g[k].push_back(at(x, idx));
  });
  return g;
}

template <class F>
std::vector<double> each(const std::vector<std::vector<double>>& g, F f) {
  std::vector<double> out;
  for (const auto& v : g) out.push_back(f(v));
  return out;
}

double ref_sum(const std::vector<double>& v) {
  double s = 0;
  for (double a : v) s += a;
  return s;
}
double ref_var(const std::vector<double>& v, int64_t correction) {
  double m = ref_sum(v) / double(v.size()), s = 0;
  for (double a : v) s += (a - m) * (a - m);
  return s / double(int64_t(v.size()) - correction);
}
// Index of the first max (Max) or min; the first NaN wins.
template <bool Max>
int64_t ref_arg(const std::vector<double>& v) {
  int64_t best = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) return int64_t(i);
    if (Max ? v[i] > v[best] : v[i] < v[best]) best = int64_t(i);
  }
  return best;
}

// The same data as contiguous, transposed, stepped-slice and expanded views of shape (4, 6, 5).
std::vector<std::pair<std::string, Tensor>> layouts(DType dt, uint64_t seed) {
  Tensor base = test::random({4, 6, 5}, dt, seed);
  Tensor wide = test::random({5, 6, 8}, dt, seed + 1);
  Tensor row = test::random({1, 6, 5}, dt, seed + 2);
  return {{"contiguous", base},
          {"transposed", test::random({5, 6, 4}, dt, seed + 3).transpose(0, 2)},
          {"permuted", test::random({6, 5, 4}, dt, seed + 4).permute({2, 0, 1})},
          {"stepped slice", wide.transpose(0, 2).slice(0, 1, 8, 2)},
          {"expanded", row.expand({4, 6, 5})}};
}

const std::vector<std::vector<int64_t>> kDimSets = {{}, {0}, {1}, {2}, {-1}, {0, 1}, {1, 2}, {0, 2}, {2, 0}, {-3, -2, -1}};

Shape expected_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  std::set<int64_t> red;
  for (int64_t d : dims) red.insert(d < 0 ? d + s.ndim() : d);
  Shape out;
  for (int64_t d = 0; d < s.ndim(); ++d) {
    bool r = dims.empty() || red.count(d);
    if (!r) out.push_back(s[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

}  // namespace

TEST_CASE("sum, mean, var, std of floating tensors match double loops for every layout and dim set") {
  for (DType dt : kFloating) {
    double rtol = test::rtol_for(dt);
    for (auto& [name, x] : layouts(dt, 7)) {
      for (const auto& dims : kDimSets) {
        for (bool keepdim : {false, true}) {
          std::string what = std::string(dtype_name(dt)) + " " + name + " dims " +
                             detail::str_cat(Shape(dims.begin(), dims.end())) + (keepdim ? " keepdim" : "");
          CAPTURE(what);
          auto g = groups(x, dims);
          Shape shape = expected_shape(x.shape(), dims, keepdim);
          Tensor s = ops::sum(x, dims, keepdim);
          CHECK(s.shape() == shape);
          CHECK(s.dtype() == dt);
          CHECK(s.is_contiguous());
          double atol = rtol * 4.0;  // sums of values in [-2, 2] can cancel to near zero
          test::check_close(s, each(g, ref_sum), rtol, atol, what + " sum");
          test::check_close(ops::mean(x, dims, keepdim),
                            each(g, [](const auto& v) { return ref_sum(v) / double(v.size()); }), rtol, rtol,
                            what + " mean");
          Tensor var = ops::var(x, dims, 1, keepdim);
          CHECK(var.shape() == shape);
          test::check_close(var, each(g, [](const auto& v) { return ref_var(v, 1); }), rtol, rtol, what + " var");
          test::check_close(ops::std(x, dims, 0, keepdim),
                            each(g, [](const auto& v) { return std::sqrt(ref_var(v, 0)); }), rtol, rtol,
                            what + " std");
        }
      }
    }
  }
}

TEST_CASE("amax, amin, max, min, argmax, argmin match double loops") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::u8}) {
    double lo = dt == DType::u8 ? 0.0 : -50.0;
    Tensor base = test::random({4, 6, 5}, dt, 11, lo, lo + 100.0);
    std::vector<std::pair<std::string, Tensor>> xs = {
        {"contiguous", base},
        {"transposed", test::random({5, 6, 4}, dt, 12, lo, lo + 100.0).transpose(0, 2)},
        {"stepped slice", test::random({4, 12, 5}, dt, 13, lo, lo + 100.0).slice(1, 0, 12, 2)},
        {"expanded", test::random({4, 1, 5}, dt, 14, lo, lo + 100.0).expand({4, 6, 5})}};
    for (auto& [name, x] : xs) {
      for (const auto& dims : kDimSets) {
        std::string what = std::string(dtype_name(dt)) + " " + name;
        CAPTURE(what);
        CAPTURE(dims.size());
        auto g = groups(x, dims);
        test::check_close(ops::amax(x, dims), each(g, [](const auto& v) { return *std::max_element(v.begin(), v.end()); }), 0, 0, what + " amax");
        test::check_close(ops::amin(x, dims, true), each(g, [](const auto& v) { return *std::min_element(v.begin(), v.end()); }), 0, 0, what + " amin");
      }
      for (int64_t dim : {0, 1, 2, -1}) {
        for (bool keepdim : {false, true}) {
          CAPTURE(dim);
          auto g = groups(x, {dim});
          auto mx = ops::max(x, dim, keepdim);
          auto mn = ops::min(x, dim, keepdim);
          Shape shape = expected_shape(x.shape(), {dim}, keepdim);
          CHECK(mx.values.shape() == shape);
          CHECK(mx.indices.shape() == shape);
          CHECK(mx.values.dtype() == dt);
          CHECK(mx.indices.dtype() == DType::i64);
          auto imax = each(g, [](const auto& v) { return double(ref_arg<true>(v)); });
          auto imin = each(g, [](const auto& v) { return double(ref_arg<false>(v)); });
          test::check_close(mx.indices, imax, 0, 0, name + " max indices");
          test::check_close(mn.indices, imin, 0, 0, name + " min indices");
          test::check_close(ops::argmax(x, dim, keepdim), imax, 0, 0, name + " argmax");
          test::check_close(ops::argmin(x, dim, keepdim), imin, 0, 0, name + " argmin");
          std::vector<double> vmax;
          for (size_t k = 0; k < g.size(); ++k) vmax.push_back(g[k][size_t(imax[k])]);
          test::check_close(mx.values, vmax, 0, 0, name + " max values");
        }
      }
    }
  }
}

TEST_CASE("ties pick the first index; NaN propagates through max, amax and argmax") {
  Tensor t = from_vector<float>({1, 3, 3, 0, 2, 2, 2, 2}, {2, 4});
  CHECK(ops::argmax(t, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(ops::argmin(t, 1).to_vector<int64_t>() == std::vector<int64_t>{3, 0});
  CHECK(ops::argmax(t.t(), 0).to_vector<int64_t>() == std::vector<int64_t>{1, 0});

  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType dt : kFloating) {
    CAPTURE(dt);
    Tensor x = from_vector<float>({1, nan, 5, 4, 2, 7, nan, 3, 1}, {3, 3}).to(dt);
    auto m = ops::max(x, 1);
    auto mv = test::values(m.values);
    CHECK(std::isnan(mv[0]));
    CHECK(mv[1] == 7.0);
    CHECK(std::isnan(mv[2]));
    CHECK(m.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 0});
    CHECK(ops::argmin(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0});
    // Down the columns (the column-accumulating path): NaN in columns 0 and 1.
    CHECK(ops::argmax(x, 0).to_vector<int64_t>() == std::vector<int64_t>{2, 0, 1});
    auto col = test::values(ops::amax(x, {0}));
    CHECK(std::isnan(col[0]));
    CHECK(std::isnan(col[1]));
    CHECK(col[2] == 7.0);
    CHECK(std::isnan(ops::amin(x, {}).item()));
    CHECK(std::isnan(ops::sum(x).item()));
  }
}

TEST_CASE("sum of integers and bool gives i64") {
  for (DType dt : {DType::i64, DType::i32, DType::u8}) {
    Tensor x = test::random({7, 9}, dt, 5, dt == DType::u8 ? 0.0 : -100.0, 100.0);
    for (const auto& dims : std::vector<std::vector<int64_t>>{{}, {0}, {1}}) {
      Tensor s = ops::sum(x.t(), dims);
      CHECK(s.dtype() == DType::i64);
      test::check_close(s, each(groups(x.t(), dims), ref_sum), 0, 0, dtype_name(dt));
    }
  }
  Tensor b = ops::gt(test::random({5, 8}, DType::f32, 3), 0.0);
  Tensor s = ops::sum(b, {1});
  CHECK(s.dtype() == DType::i64);
  test::check_close(s, each(groups(b, {1}), ref_sum), 0, 0, "bool");
  CHECK(ops::sum(b).item() > 0);
}

TEST_CASE("long rows and columns: blocked sums match the reference and do not depend on the thread count") {
  int saved = num_threads();
  struct Case { Shape shape; std::vector<int64_t> dims; };
  std::vector<Case> cases = {{{1, 50000}, {1}}, {{3, 20000}, {-1}}, {{50000, 3}, {0}},
                             {{2, 9000, 40}, {1}}, {{37, 700}, {}}, {{300, 600}, {0}}};
  for (DType dt : kFloating) {
    for (const auto& c : cases) {
      Tensor x = test::random(c.shape, dt, 21);
      set_num_threads(1);
      Tensor s1 = ops::sum(x, c.dims), m1 = ops::mean(x, c.dims), v1 = ops::var(x, c.dims);
      Tensor a1 = ops::amax(x, c.dims);
      set_num_threads(2);
      Tensor s2 = ops::sum(x, c.dims), m2 = ops::mean(x, c.dims), v2 = ops::var(x, c.dims);
      Tensor a2 = ops::amax(x, c.dims);
      CAPTURE(c.shape);
      CHECK(bitwise_equal(s1, s2));
      CHECK(bitwise_equal(m1, m2));
      CHECK(bitwise_equal(v1, v2));
      CHECK(bitwise_equal(a1, a2));
      auto g = groups(x, c.dims);
      double rtol = test::rtol_for(dt);
      // Long sums of bf16 cancel: compare against the scale of the summed magnitudes.
      std::vector<double> scale = each(g, [](const auto& v) { double s = 0; for (double a : v) s += std::fabs(a); return s; });
      auto sums = test::values(s2);
      auto ref = each(g, ref_sum);
      for (size_t k = 0; k < ref.size(); ++k) REQUIRE(std::fabs(sums[k] - ref[k]) <= rtol * scale[k] + 1e-12);
      test::check_close(v2, each(g, [](const auto& v) { return ref_var(v, 1); }), rtol, 0, "var");
    }
  }
  set_num_threads(saved);
}

TEST_CASE("scalars and empty reductions") {
  Tensor s = scalar_tensor(3.5);
  CHECK(ops::sum(s).item() == 3.5);
  CHECK(ops::sum(s, {0}).shape() == Shape{});
  CHECK(ops::amax(s, {-1}).item() == 3.5);
  Tensor e = zeros({3, 0});
  CHECK(ops::sum(e, {1}).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(std::isnan(ops::mean(e, {1}).to_vector<float>()[0]));
  CHECK(ops::sum(e, {0}).shape() == Shape{0});
  CHECK_ERROR_CONTAINS(ops::amax(e, {1}), "amax", "empty", "[3, 0]");
}

TEST_CASE("bad arguments name the op and the values") {
  Tensor x = test::random({2, 3, 4});
  CHECK_ERROR_CONTAINS(ops::sum(x, {3}), "sum", "dim 3", "out of range");
  CHECK_ERROR_CONTAINS(ops::mean(x, {-4}), "mean", "-4");
  CHECK_ERROR_CONTAINS(ops::sum(x, {1, -2}), "sum", "dim 1", "more than once");
  CHECK_ERROR_CONTAINS(ops::argmax(x, 5), "argmax", "dim 5");
  CHECK_ERROR_CONTAINS(ops::mean(x.to(DType::i64)), "mean", "i64");
  CHECK_ERROR_CONTAINS(ops::var(x.to(DType::i32), {0}), "var", "i32");
  CHECK_ERROR_CONTAINS(ops::max(ops::gt(x, 0.0), 0), "max", "bool");
  CHECK_ERROR_CONTAINS(ops::sum(Tensor()), "sum", "undefined");
}
