// The elementwise kernels on the CPU: each op is a lambda on compute types (acc_t: float for the
// 16-bit floats) mapped over its operands by cpu::map_kernel (core/cpu/loops.h). The GELUs are the
// formulas of core/formulas.h that the CUDA functors compute too.
#include <kiln/core/cpu/elementwise.h>

#include <cmath>
#include <type_traits>

#include <kiln/core/cpu/loops.h>
#include <kiln/core/cpu/vec_math.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/formulas.h>

namespace kiln::cpu {

namespace {

template <class Op>
void unary_float(const char* name, const Tensor& out, const Tensor& x, Op op) {
  dispatch_floating(x.dtype(), name, [&]<class T>() { map_kernel<T, T>(out, {&x}, op); });
}

template <class Op>
void unary_numeric(const char* name, const Tensor& out, const Tensor& x, Op op) {
  dispatch_numeric(x.dtype(), name, [&]<class T>() { map_kernel<T, T>(out, {&x}, op); });
}

template <class Op>
void binary_numeric(const char* name, const Tensor& out, const Tensor& a, const Tensor& b, Op op) {
  dispatch_numeric(a.dtype(), name, [&]<class T>() { map_kernel<T, T, T>(out, {&a, &b}, op); });
}

template <class Op>
void compare_numeric(const char* name, const Tensor& out, const Tensor& a, const Tensor& b, Op op) {
  dispatch_numeric(a.dtype(), name, [&]<class T>() { map_kernel<bool, T, T>(out, {&a, &b}, op); });
}

// A floating formula (the GELU backwards); integer T never reaches it (the front computes them in
// a float type), but every dtype of dispatch_numeric instantiates it.
template <class F>
auto floating_only(F f) {
  return [f](auto g, auto v) {
    if constexpr (std::is_floating_point_v<decltype(v)>) return f(g, v); else return g;
  };
}

}  // namespace

void unary(const char* name, UnaryOp op, const Tensor& out, const Tensor& x) {
  switch (op) {
    case UnaryOp::neg: return unary_numeric(name, out, x, [](auto v) { return decltype(v)(-v); });
    case UnaryOp::abs:
      return unary_numeric(name, out, x, [](auto v) {
        if constexpr (std::is_unsigned_v<decltype(v)>) return v; else return v < 0 ? decltype(v)(-v) : v;
      });
    case UnaryOp::relu: return unary_numeric(name, out, x, [](auto v) { return v < 0 ? decltype(v)(0) : v; });
    case UnaryOp::square: return unary_numeric(name, out, x, [](auto v) { return decltype(v)(v * v); });
    case UnaryOp::exp: return unary_float(name, out, x, [](auto v) { return exp_any(v); });
    case UnaryOp::log: return unary_float(name, out, x, [](auto v) { return std::log(v); });
    case UnaryOp::sqrt: return unary_float(name, out, x, [](auto v) { return std::sqrt(v); });
    case UnaryOp::rsqrt: return unary_float(name, out, x, [](auto v) { return decltype(v)(1) / std::sqrt(v); });
    case UnaryOp::tanh: return unary_float(name, out, x, [](auto v) { return std::tanh(v); });
    case UnaryOp::sigmoid:
      return unary_float(name, out, x, [](auto v) { return decltype(v)(1) / (decltype(v)(1) + exp_any(-v)); });
    case UnaryOp::gelu_tanh: return unary_float(name, out, x, [](auto v) { return formulas::gelu_tanh<VecMath>(v); });
    case UnaryOp::gelu_erf: return unary_float(name, out, x, [](auto v) { return formulas::gelu_erf<VecMath>(v); });
  }
  KILN_ASSERT(false, name, ": unknown unary op ", static_cast<int>(op));
}

void binary(const char* name, BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  switch (op) {
    case BinaryOp::add: return binary_numeric(name, out, a, b, [](auto x, auto y) { return x + y; });
    case BinaryOp::sub: return binary_numeric(name, out, a, b, [](auto x, auto y) { return x - y; });
    case BinaryOp::rsub: return binary_numeric(name, out, a, b, [](auto x, auto y) { return y - x; });
    case BinaryOp::mul: return binary_numeric(name, out, a, b, [](auto x, auto y) { return x * y; });
    case BinaryOp::div: return binary_numeric(name, out, a, b, [](auto x, auto y) { return x / y; });
    case BinaryOp::pow:
      return binary_numeric(name, out, a, b,
                            [](auto x, auto y) { return static_cast<decltype(x)>(std::pow(x, y)); });
    // NaN propagates from either side (x != x is false for integers).
    case BinaryOp::maximum:
      return binary_numeric(name, out, a, b, [](auto x, auto y) { return (x > y || x != x) ? x : y; });
    case BinaryOp::minimum:
      return binary_numeric(name, out, a, b, [](auto x, auto y) { return (x < y || x != x) ? x : y; });
    case BinaryOp::gelu_tanh_backward:
      return binary_numeric(name, out, a, b, floating_only([](auto g, auto v) {
                              return formulas::gelu_tanh_backward<VecMath>(g, v);
                            }));
    case BinaryOp::gelu_erf_backward:
      return binary_numeric(name, out, a, b, floating_only([](auto g, auto v) {
                              return formulas::gelu_erf_backward<VecMath>(g, v);
                            }));
  }
  KILN_ASSERT(false, name, ": unknown binary op ", static_cast<int>(op));
}

void compare(const char* name, CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  switch (op) {
    case CompareOp::eq: return compare_numeric(name, out, a, b, [](auto x, auto y) { return x == y; });
    case CompareOp::ne: return compare_numeric(name, out, a, b, [](auto x, auto y) { return x != y; });
    case CompareOp::lt: return compare_numeric(name, out, a, b, [](auto x, auto y) { return x < y; });
    case CompareOp::le: return compare_numeric(name, out, a, b, [](auto x, auto y) { return x <= y; });
    case CompareOp::gt: return compare_numeric(name, out, a, b, [](auto x, auto y) { return x > y; });
    case CompareOp::ge: return compare_numeric(name, out, a, b, [](auto x, auto y) { return x >= y; });
  }
  KILN_ASSERT(false, name, ": unknown comparison ", static_cast<int>(op));
}

void add_scaled(const char* name, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  binary_numeric(name, out, a, b, [alpha](auto x, auto y) { return decltype(x)(x + decltype(x)(alpha) * y); });
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_all(a.dtype(), "where", [&]<class T>() {
    map_kernel<T, bool, T, T>(out, {&cond, &a, &b}, [](bool k, auto x, auto y) { return k ? x : y; });
  });
}

void masked_fill(const Tensor& out, const Tensor& x, const Tensor& mask, double value) {
  dispatch_all(x.dtype(), "masked_fill", [&]<class T>() {
    const acc_t<T> v = static_cast<acc_t<T>>(value);
    map_kernel<T, T, bool>(out, {&x, &mask}, [v](auto xv, bool k) { return k ? v : xv; });
  });
}

}  // namespace kiln::cpu
