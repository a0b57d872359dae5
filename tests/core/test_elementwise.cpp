// Elementwise ops against double-precision loops: every op, broadcasting, non-contiguous views,
// every dtype it supports, promotion, and bad input.
#include "test_util.h"

#include <cmath>

using namespace kiln;
using test::at;
using test::for_each_index;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

// Expected values of a unary op through a double reference, reading the input's stored values.
std::vector<double> ref_unary(const Tensor& x, double (*f)(double)) {
  std::vector<double> out;
  for_each_index(x.shape(), [&](const std::vector<int64_t>& i) { out.push_back(f(at(x, i))); });
  return out;
}

// Broadcast read: index into `t` for an output multi-index (numpy alignment from the right).
double at_broadcast(const Tensor& t, const std::vector<int64_t>& out_idx) {
  std::vector<int64_t> idx(t.dim());
  size_t lead = out_idx.size() - t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) idx[d] = t.shape()[d] == 1 ? 0 : out_idx[lead + d];
  return at(t, idx);
}

std::vector<double> ref_binary(const Tensor& a, const Tensor& b, const Shape& shape, double (*f)(double, double)) {
  std::vector<double> out;
  for_each_index(shape, [&](const std::vector<int64_t>& i) { out.push_back(f(at_broadcast(a, i), at_broadcast(b, i))); });
  return out;
}

double gelu_tanh_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double gelu_erf_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

}  // namespace

TEST_CASE("unary float ops match double loops on every float dtype, contiguous and strided") {
  struct Case { const char* name; Tensor (*op)(const Tensor&); double (*ref)(double); double lo, hi; };
  const Case cases[] = {
      {"neg", ops::neg, [](double x) { return -x; }, -3, 3},
      {"abs", ops::abs, [](double x) { return std::fabs(x); }, -3, 3},
      {"exp", ops::exp, [](double x) { return std::exp(x); }, -20, 20},
      {"log", ops::log, [](double x) { return std::log(x); }, 0.01, 50},
      {"sqrt", ops::sqrt, [](double x) { return std::sqrt(x); }, 0.0, 50},
      {"rsqrt", ops::rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.01, 50},
      {"tanh", ops::tanh, [](double x) { return std::tanh(x); }, -5, 5},
      {"sin", ops::sin, [](double x) { return std::sin(x); }, -7, 7},
      {"cos", ops::cos, [](double x) { return std::cos(x); }, -7, 7},
      {"sigmoid", ops::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -20, 20},
      {"relu", ops::relu, [](double x) { return x < 0 ? 0.0 : x; }, -3, 3},
      {"gelu_tanh", ops::gelu_tanh, gelu_tanh_ref, -6, 6},
      {"gelu_erf", ops::gelu_erf, gelu_erf_ref, -6, 6},
      {"square", ops::square, [](double x) { return x * x; }, -3, 3},
  };
  for (const Case& c : cases) {
    for (DType dt : kFloatTypes) {
      Tensor x = test::random({37, 70}, dt, 11, c.lo, c.hi);
      std::string what = std::string(c.name) + " " + dtype_name(dt);
      Tensor y = c.op(x);
      CHECK(y.dtype() == dt);
      // Rounding of the result to dt (the reference is exact) plus the op's own error.
      double rtol = test::rtol_for(dt) * 2, atol = dt == DType::f32 ? 1e-6 : test::rtol_for(dt) * 1e-2;
      test::check_close(y, test::rounded(ref_unary(x, c.ref), dt), rtol, atol, what);
      // Non-contiguous: a transposed, strided view.
      Tensor v = x.t().slice(0, 1, 70, 3);
      test::check_close(c.op(v), test::rounded(ref_unary(v, c.ref), dt), rtol, atol, what + " strided");
    }
  }
}

TEST_CASE("exp_f32 edge cases: overflow, underflow to subnormals, NaN") {
  Tensor x = from_vector(std::vector<float>{89.f, -87.f, -100.f, -104.5f, 0.f, NAN, INFINITY, -INFINITY}, {8});
  auto y = test::values(ops::exp(x));
  CHECK(std::isinf(y[0]));
  CHECK(y[1] == doctest::Approx(std::exp(-87.0)).epsilon(1e-6));
  CHECK(y[2] == doctest::Approx(std::exp(-100.0)).epsilon(1e-2));  // subnormal: fewer bits
  CHECK(y[3] == 0.0);
  CHECK(y[4] == 1.0);
  CHECK(std::isnan(y[5]));
  CHECK(std::isinf(y[6]));
  CHECK(y[7] == 0.0);
}

TEST_CASE("binary ops broadcast and match double loops") {
  struct Case { const char* name; Tensor (*op)(const Tensor&, const Tensor&); double (*ref)(double, double); };
  const Case cases[] = {
      {"add", ops::add, [](double a, double b) { return a + b; }},
      {"sub", ops::sub, [](double a, double b) { return a - b; }},
      {"mul", ops::mul, [](double a, double b) { return a * b; }},
      {"div", ops::div, [](double a, double b) { return a / b; }},
      {"maximum", ops::maximum, [](double a, double b) { return std::max(a, b); }},
      {"minimum", ops::minimum, [](double a, double b) { return std::min(a, b); }},
  };
  const std::pair<Shape, Shape> shapes[] = {
      {{4, 5, 6}, {4, 5, 6}}, {{4, 5, 6}, {6}}, {{4, 1, 6}, {5, 1}}, {{1}, {3, 7}}, {{}, {2, 3}}, {{64, 1000}, {1000}},
  };
  for (const Case& c : cases)
    for (DType dt : kFloatTypes)
      for (auto& [sa, sb] : shapes) {
        Tensor a = test::random(sa, dt, 1), b = test::random(sb, dt, 2, 0.5, 3.0);
        Shape out = broadcast_shapes(sa, sb);
        Tensor y = c.op(a, b);
        CHECK(y.shape() == out);
        double rtol = test::rtol_for(dt) * 2;
        test::check_close(y, test::rounded(ref_binary(a, b, out, c.ref), dt), rtol, 1e-6, std::string(c.name) + " " + dtype_name(dt));
        test::check_close(c.op(b, a), test::rounded(ref_binary(b, a, broadcast_shapes(sb, sa), c.ref), dt), rtol, 1e-6,
                          std::string(c.name) + " swapped");
      }
}

TEST_CASE("binary ops on non-contiguous operands and integers") {
  Tensor a = test::random({8, 9}, DType::f32, 5);
  Tensor b = test::random({9, 8}, DType::f32, 6).t();  // (8, 9), column-major
  test::check_close(ops::mul(a, b), ref_binary(a, b, {8, 9}, [](double x, double y) { return x * y; }), 1e-6, 0,
                    "mul strided");
  Tensor i = test::random({5, 4}, DType::i64, 7, -100, 100), j = test::random({4}, DType::i32, 8, 1, 20);
  Tensor s = ops::add(i, j);
  CHECK(s.dtype() == DType::i64);
  test::check_close(s, ref_binary(i, j, {5, 4}, [](double x, double y) { return x + y; }), 0, 0, "add int");
  Tensor q = ops::div(i, j);  // true division, like torch
  CHECK(q.dtype() == DType::f32);
  test::check_close(q, ref_binary(i, j, {5, 4}, [](double x, double y) { return x / y; }), 1e-6, 0, "div int");
  Tensor u = test::random({300}, DType::u8, 9, 0, 255);
  CHECK(ops::maximum(u, u).dtype() == DType::u8);
  test::check_close(ops::maximum(u, ops::rsub(u, 255)), ref_binary(u, u, {300}, [](double x, double) {
                      return std::max(x, 255 - x); }), 0, 0, "u8 max");
}

TEST_CASE("type promotion follows torch") {
  Tensor f = ones({2}), d = ones({2}, DType::f64), h = ones({2}, DType::f16), bh = ones({2}, DType::bf16);
  Tensor i = ones({2}, DType::i32), l = ones({2}, DType::i64);
  CHECK(ops::add(f, d).dtype() == DType::f64);
  CHECK(ops::add(h, bh).dtype() == DType::f32);
  CHECK(ops::add(i, l).dtype() == DType::i64);
  CHECK(ops::add(i, h).dtype() == DType::f16);
  CHECK(ops::add(l, 2.0).dtype() == DType::i64);
  CHECK(ops::add(l, 2.5).dtype() == DType::f32);
  CHECK(ops::mul(bh, 3.0).dtype() == DType::bf16);
  CHECK(ops::exp(l).dtype() == DType::f32);
}

// PyTorch 1.13's values for the same inputs: exact beyond 2^32, wrap on overflow, and a negative
// exponent gives 1 for base 1, +-1 for base -1, else 0.
TEST_CASE("integer pow is exact and follows PyTorch's integral rules") {
  Tensor b = from_vector(std::vector<int64_t>{3, 2, 3, -1, -1, 1, 2, 0, 0, -3, 5, -2}, {12});
  Tensor e = from_vector(std::vector<int64_t>{1, 40, 33, 3, -4, -9, -1, 0, 5, 3, -2, -3}, {12});
  CHECK(test::values(ops::pow(b, e)) ==
        std::vector<double>{3, 1099511627776.0, 5559060566555523.0, -1, 1, 1, 0, 1, 0, -27, 0, 0});
  Tensor u = from_vector(std::vector<uint8_t>{2, 3}, {2});
  CHECK(test::values(ops::pow(u, from_vector(std::vector<uint8_t>{9, 5}, {2}))) == std::vector<double>{0, 243});
  Tensor i = from_vector(std::vector<int32_t>{3}, {1});
  CHECK(test::values(ops::pow(i, from_vector(std::vector<int32_t>{21}, {1}))) == std::vector<double>{1870418611});
}

TEST_CASE("scalar variants, pow, comparisons, where and masked_fill") {
  for (DType dt : kFloatTypes) {
    Tensor x = test::random({6, 7}, dt, 21, 0.1, 3.0);
    double r = test::rtol_for(dt) * 2;
    test::check_close(ops::add(x, 1.5), ref_unary(x, [](double v) { return v + 1.5; }), r, 1e-6, "add scalar");
    test::check_close(ops::sub(x, 1.5), ref_unary(x, [](double v) { return v - 1.5; }), r, 1e-6, "sub scalar");
    test::check_close(ops::rsub(x, 1.5), ref_unary(x, [](double v) { return 1.5 - v; }), r, 1e-6, "rsub");
    test::check_close(ops::mul(x, -2.0), ref_unary(x, [](double v) { return -2 * v; }), r, 1e-6, "mul scalar");
    test::check_close(ops::div(x, 4.0), ref_unary(x, [](double v) { return v / 4; }), r, 1e-6, "div scalar");
    test::check_close(ops::pow(x, 1.7), ref_unary(x, [](double v) { return std::pow(v, 1.7); }), r * 2, 1e-6, "pow");
    test::check_close(ops::pow(x, 2.0), ref_unary(x, [](double v) { return v * v; }), r, 1e-6, "pow 2");
    test::check_close(ops::maximum(x, 1.0), ref_unary(x, [](double v) { return std::max(v, 1.0); }), r, 0, "max s");
    Tensor e = test::random({7}, dt, 22, 0.5, 2.0);
    test::check_close(ops::pow(x, e), ref_binary(x, e, {6, 7}, [](double a, double b) { return std::pow(a, b); }),
                      r * 2, 1e-6, "pow tensor");
  }
  Tensor a = from_vector(std::vector<float>{1, 2, 3, 4}, {4});
  Tensor b = from_vector(std::vector<float>{4, 2, 1, 4}, {4});
  CHECK(test::values(ops::eq(a, b)) == std::vector<double>{0, 1, 0, 1});
  CHECK(test::values(ops::ne(a, b)) == std::vector<double>{1, 0, 1, 0});
  CHECK(test::values(ops::lt(a, b)) == std::vector<double>{1, 0, 0, 0});
  CHECK(test::values(ops::le(a, b)) == std::vector<double>{1, 1, 0, 1});
  CHECK(test::values(ops::gt(a, b)) == std::vector<double>{0, 0, 1, 0});
  CHECK(test::values(ops::ge(a, b)) == std::vector<double>{0, 1, 1, 1});
  CHECK(test::values(ops::gt(a, 2.5)) == std::vector<double>{0, 0, 1, 1});
  CHECK(ops::lt(a, b).dtype() == DType::b8);

  Tensor cond = ops::gt(test::random({3, 4}, DType::f32, 30), 0.0);
  Tensor x = test::random({3, 4}, DType::f32, 31), y = test::random({4}, DType::f64, 32);
  Tensor w = ops::where(cond, x, y);
  CHECK(w.dtype() == DType::f64);
  std::vector<double> expect;
  for_each_index({3, 4}, [&](const std::vector<int64_t>& i) { expect.push_back(at(cond, i) ? at(x, i) : at(y, {i[1]})); });
  test::check_close(w, expect, 0, 0, "where");

  Tensor mask = ops::lt(arange(4).view({1, 4}), 2.0);  // broadcast over rows
  Tensor m = ops::masked_fill(x, mask, -1e9);
  expect.clear();
  for_each_index({3, 4}, [&](const std::vector<int64_t>& i) { expect.push_back(i[1] < 2 ? -1e9 : at(x, i)); });
  test::check_close(m, expect, 1e-7, 0, "masked_fill");
}

TEST_CASE("NaN propagates through maximum/minimum and relu") {
  Tensor a = from_vector(std::vector<float>{NAN, 1.f, 2.f}, {3});
  Tensor b = from_vector(std::vector<float>{0.f, NAN, 1.f}, {3});
  auto mx = test::values(ops::maximum(a, b));
  CHECK(std::isnan(mx[0]));
  CHECK(std::isnan(mx[1]));
  CHECK(mx[2] == 2.0);
  auto mn = test::values(ops::minimum(a, b));
  CHECK(std::isnan(mn[0]));
  CHECK(std::isnan(mn[1]));
  CHECK(mn[2] == 1.0);
  CHECK(std::isnan(test::values(ops::relu(a))[0]));
}

TEST_CASE("in-place add_ and mul_") {
  Tensor a = test::random({4, 5}, DType::f32, 40);
  auto before = test::values(a);
  Tensor b = test::random({5}, DType::f64, 41);
  ops::add_(a, b, 0.5);
  std::vector<double> expect;
  for_each_index({4, 5}, [&](const std::vector<int64_t>& i) {
    expect.push_back(float(before[i[0] * 5 + i[1]] + float(0.5f * float(at(b, {i[1]})))));
  });
  test::check_close(a, expect, 1e-6, 1e-7, "add_");
  Tensor view = a.t();  // in place through a transposed view writes the right elements
  ops::mul_(view, 2.0);
  for (double& e : expect) e *= 2;
  test::check_close(a, expect, 1e-6, 1e-7, "mul_ view");
  CHECK_ERROR_CONTAINS(ops::add_(b, a), "add_", "[4, 5]", "[5]");
}

TEST_CASE("results do not depend on the thread count") {
  Tensor x = test::random({300, 1000}, DType::f32, 50, -5, 5);
  Tensor y = test::random({1000}, DType::f32, 51);
  int saved = num_threads();
  set_num_threads(1);
  auto one = test::values(ops::gelu_tanh(ops::add(x, y)));
  set_num_threads(2);
  auto two = test::values(ops::gelu_tanh(ops::add(x, y)));
  set_num_threads(saved);
  CHECK(one == two);
}

TEST_CASE("bad input names the values") {
  Tensor a = zeros({2, 3}), b = zeros({4});
  CHECK_ERROR_CONTAINS(ops::add(a, b), "add", "[2, 3]", "[4]");
  CHECK_ERROR_CONTAINS(ops::where(a, a, a), "where", "bool", "f32");
  CHECK_ERROR_CONTAINS(ops::masked_fill(a, ops::gt(zeros({3, 3}), 0.0), 1.0), "masked_fill", "[3, 3]");
  CHECK_ERROR_CONTAINS(ops::neg(zeros({2}, DType::b8)), "neg", "bool");
  CHECK_ERROR_CONTAINS(ops::add(a, Tensor()), "add", "undefined");
}

TEST_CASE("fused GELU backward matches the analytic derivative, finite in both tails") {
  auto dtanh = [](double x) {
    const double c = std::sqrt(2 / M_PI), t = std::tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
  };
  auto derf = [](double x) { return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); };
  for (DType dt : kFloatTypes) {
    Tensor x = test::random({33, 17}, dt, 60, -6, 6);
    Tensor g = test::random({17}, dt, 61);  // broadcast over rows
    std::vector<double> et, ee;
    for_each_index(x.shape(), [&](const std::vector<int64_t>& i) {
      et.push_back(at(g, {i[1]}) * dtanh(at(x, i)));
      ee.push_back(at(g, {i[1]}) * derf(at(x, i)));
    });
    const double tol = dt == DType::f64 ? 1e-12 : test::rtol_for(dt) * 4;
    Tensor rt = ops::gelu_tanh_backward(g, x), re = ops::gelu_erf_backward(g, x);
    CHECK(rt.dtype() == dt);
    test::check_close(rt, test::rounded(et, dt), tol, tol, std::string("gelu_tanh_backward ") + dtype_name(dt));
    test::check_close(re, test::rounded(ee, dt), tol, tol, std::string("gelu_erf_backward ") + dtype_name(dt));
  }
  // Tails: the derivative tends to 1 and 0 without inf/NaN; NaN stays NaN.
  Tensor x = from_vector(std::vector<float>{-100.f, -20.f, 0.f, 20.f, 100.f, NAN}, {6});
  Tensor one = ones({6});
  test::check_close(ops::gelu_tanh_backward(one, x), {0, 0, 0.5, 1, 1, NAN}, 1e-6, 1e-6, "gelu_tanh_backward tails");
  test::check_close(ops::gelu_erf_backward(one, x), {0, 0, 0.5, 1, 1, NAN}, 1e-6, 1e-6, "gelu_erf_backward tails");
  // Integer inputs give f32, like gelu itself.
  CHECK(ops::gelu_tanh_backward(ones({2}, DType::i32), ones({2}, DType::i32)).dtype() == DType::f32);
}
