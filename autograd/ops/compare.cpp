// isclose, allclose, equal (see compare.h), from kiln::ops' comparisons: bool "or" and "and" are
// where(p, p, q) and where(p, q, p), so no new kernel is needed on either device.
#include <kiln/autograd/ops/compare.h>

#include <limits>

#include <kiln/core/error.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/reduce.h>

namespace kiln {
namespace {

Tensor logical_or(const Tensor& p, const Tensor& q) { return ops::where(p, p, q); }
Tensor logical_and(const Tensor& p, const Tensor& q) { return ops::where(p, q, p); }

// Whether every element of the bool tensor t is set (one host read).
bool all_set(const Tensor& t) { return static_cast<int64_t>(ops::sum(t).item()) == t.numel(); }

}  // namespace

Tensor isclose(const Tensor& a_in, const Tensor& b_in, double rtol, double atol, bool equal_nan) {
  check_defined(a_in, "isclose", "a");
  check_defined(b_in, "isclose", "b");
  KILN_CHECK_VALUE(a_in.dtype() == b_in.dtype(), "isclose: a is ", a_in.dtype(), " but b is ", b_in.dtype(),
                   "; convert one to the other's dtype first");
  KILN_CHECK_VALUE(rtol >= 0 && atol >= 0, "isclose: rtol and atol must be >= 0, got rtol ", rtol, " and atol ",
                   atol);
  const bool floating = is_floating(a_in.dtype());
  const Tensor a = floating ? a_in : a_in.to(DType::f64), b = floating ? b_in : b_in.to(DType::f64);
  const Tensor diff = ops::abs(ops::sub(a, b));  // NaN where either is NaN, inf - inf, ...
  const Tensor tolerance = ops::add(ops::mul(ops::abs(b), rtol), atol);
  const Tensor within = logical_and(ops::le(diff, tolerance), ops::lt(diff, std::numeric_limits<double>::infinity()));
  Tensor close = logical_or(ops::eq(a, b), within);
  if (equal_nan) close = logical_or(close, logical_and(ops::ne(a, a), ops::ne(b, b)));
  return close;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  return all_set(isclose(a, b, rtol, atol, equal_nan));
}

bool equal(const Tensor& a, const Tensor& b) {
  check_defined(a, "equal", "a");
  check_defined(b, "equal", "b");
  if (a.shape() != b.shape()) return false;
  return all_set(ops::eq(a, b));
}

}  // namespace kiln
