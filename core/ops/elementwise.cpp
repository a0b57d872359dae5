// CPU elementwise ops: type promotion and broadcasting here, the loops in core/cpu/loops.h.
#include <kiln/core/ops/elementwise.h>

#include <cmath>
#include <type_traits>

#include <kiln/core/cpu/loops.h>
#include <kiln/core/cpu/vec_math.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/common.h>

namespace kiln::ops {

namespace {

DType float_result(DType t) { return is_floating(t) ? t : DType::f32; }

template <class Op>
Tensor unary_float(const char* name, const Tensor& x, Op op) {
  check_cpu(name, {&x});
  DType dt = float_result(x.dtype());
  Tensor in = x.to(dt);
  Tensor out = empty(x.shape(), dt);
  dispatch_floating(dt, name, [&]<class T>() { cpu::map_kernel<T, T>(out, {&in}, op); });
  return out;
}

template <class Op>
Tensor unary_numeric(const char* name, const Tensor& x, Op op) {
  check_cpu(name, {&x});
  Tensor out = empty(x.shape(), x.dtype());
  dispatch_numeric(x.dtype(), name, [&]<class T>() { cpu::map_kernel<T, T>(out, {&x}, op); });
  return out;
}

enum class Result { promoted, floating, boolean };

template <class Op>
Tensor binary(const char* name, const Tensor& a, const Tensor& b, Result kind, Op op) {
  check_cpu(name, {&a, &b});
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  DType compute = promote_types(a.dtype(), b.dtype());
  if (kind == Result::floating) compute = float_result(compute);
  Tensor ae = a.to(compute).expand(shape), be = b.to(compute).expand(shape);
  Tensor out = empty(shape, kind == Result::boolean ? DType::b8 : compute);
  dispatch_numeric(compute, name, [&]<class T>() {
    if (kind == Result::boolean)
      cpu::map_kernel<bool, T, T>(out, {&ae, &be}, op);
    else
      cpu::map_kernel<T, T, T>(out, {&ae, &be}, op);
  });
  return out;
}

// The dtype a tensor-scalar op computes in: the tensor's, unless an integer tensor meets a
// fractional scalar (then f32), as torch does.
DType scalar_compute(const Tensor& a, double b) {
  if (is_floating(a.dtype())) return a.dtype();
  return (a.dtype() != DType::b8 && std::nearbyint(b) == b) ? a.dtype() : DType::f32;
}

template <class Op>
Tensor binary_scalar(const char* name, const Tensor& a, double b, Result kind, Op op) {
  check_defined(a, name);
  DType compute = scalar_compute(a, b);
  return binary(name, a.to(compute), scalar_tensor(b, TensorOptions(compute).device(a.device())), kind, op);
}

// Bodies shared by the tensor and scalar forms.
constexpr auto kAdd = [](auto x, auto y) { return x + y; };
constexpr auto kSub = [](auto x, auto y) { return x - y; };
constexpr auto kMul = [](auto x, auto y) { return x * y; };
constexpr auto kDiv = [](auto x, auto y) { return x / y; };
constexpr auto kPow = [](auto x, auto y) { return static_cast<decltype(x)>(std::pow(x, y)); };
constexpr auto kMax = [](auto x, auto y) { return (x > y || x != x) ? x : y; };  // NaN propagates
constexpr auto kMin = [](auto x, auto y) { return (x < y || x != x) ? x : y; };
constexpr auto kEq = [](auto x, auto y) { return x == y; };
constexpr auto kNe = [](auto x, auto y) { return x != y; };
constexpr auto kLt = [](auto x, auto y) { return x < y; };
constexpr auto kLe = [](auto x, auto y) { return x <= y; };
constexpr auto kGt = [](auto x, auto y) { return x > y; };
constexpr auto kGe = [](auto x, auto y) { return x >= y; };

}  // namespace

Tensor neg(const Tensor& x) { return unary_numeric("neg", x, [](auto v) { return decltype(v)(-v); }); }
Tensor abs(const Tensor& x) {
  return unary_numeric("abs", x, [](auto v) {
    if constexpr (std::is_unsigned_v<decltype(v)>) return v; else return v < 0 ? decltype(v)(-v) : v;
  });
}
Tensor relu(const Tensor& x) {
  return unary_numeric("relu", x, [](auto v) { return v < 0 ? decltype(v)(0) : v; });
}
Tensor square(const Tensor& x) { return unary_numeric("square", x, [](auto v) { return decltype(v)(v * v); }); }

Tensor exp(const Tensor& x) { return unary_float("exp", x, [](auto v) { return cpu::exp_any(v); }); }
Tensor log(const Tensor& x) { return unary_float("log", x, [](auto v) { return std::log(v); }); }
Tensor sqrt(const Tensor& x) { return unary_float("sqrt", x, [](auto v) { return std::sqrt(v); }); }
Tensor rsqrt(const Tensor& x) {
  return unary_float("rsqrt", x, [](auto v) { return decltype(v)(1) / std::sqrt(v); });
}
Tensor tanh(const Tensor& x) { return unary_float("tanh", x, [](auto v) { return std::tanh(v); }); }
Tensor sigmoid(const Tensor& x) {
  return unary_float("sigmoid", x, [](auto v) { return decltype(v)(1) / (decltype(v)(1) + cpu::exp_any(-v)); });
}
Tensor gelu_tanh(const Tensor& x) {
  return unary_float("gelu_tanh", x, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_same_v<T, float>) {
      return cpu::gelu_tanh_f32(v);
    } else {
      T u = T(0.7978845608028654) * (v + T(0.044715) * v * v * v);
      return T(0.5) * v * (T(1) + std::tanh(u));
    }
  });
}
Tensor gelu_erf(const Tensor& x) {
  return unary_float("gelu_erf", x, [](auto v) {
    using T = decltype(v);
    return T(0.5) * v * (T(1) + std::erf(v * T(0.70710678118654752440)));
  });
}

Tensor add(const Tensor& a, const Tensor& b) { return binary("add", a, b, Result::promoted, kAdd); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary("sub", a, b, Result::promoted, kSub); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary("mul", a, b, Result::promoted, kMul); }
Tensor div(const Tensor& a, const Tensor& b) { return binary("div", a, b, Result::floating, kDiv); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary("pow", a, b, Result::promoted, kPow); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary("maximum", a, b, Result::promoted, kMax); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary("minimum", a, b, Result::promoted, kMin); }

Tensor add(const Tensor& a, double b) { return binary_scalar("add", a, b, Result::promoted, kAdd); }
Tensor sub(const Tensor& a, double b) { return binary_scalar("sub", a, b, Result::promoted, kSub); }
Tensor rsub(const Tensor& a, double b) {
  return binary_scalar("rsub", a, b, Result::promoted, [](auto x, auto y) { return y - x; });
}
Tensor mul(const Tensor& a, double b) { return binary_scalar("mul", a, b, Result::promoted, kMul); }
Tensor div(const Tensor& a, double b) {
  check_defined(a, "div");
  return binary_scalar("div", a.to(float_result(a.dtype())), b, Result::floating, kDiv);
}
Tensor pow(const Tensor& a, double e) {
  if (e == 2.0) return square(a);
  return binary_scalar("pow", a, e, Result::promoted, kPow);
}
Tensor maximum(const Tensor& a, double b) { return binary_scalar("maximum", a, b, Result::promoted, kMax); }
Tensor minimum(const Tensor& a, double b) { return binary_scalar("minimum", a, b, Result::promoted, kMin); }

Tensor eq(const Tensor& a, const Tensor& b) { return binary("eq", a, b, Result::boolean, kEq); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary("ne", a, b, Result::boolean, kNe); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary("lt", a, b, Result::boolean, kLt); }
Tensor le(const Tensor& a, const Tensor& b) { return binary("le", a, b, Result::boolean, kLe); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary("gt", a, b, Result::boolean, kGt); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary("ge", a, b, Result::boolean, kGe); }
Tensor eq(const Tensor& a, double b) { return binary_scalar("eq", a, b, Result::boolean, kEq); }
Tensor ne(const Tensor& a, double b) { return binary_scalar("ne", a, b, Result::boolean, kNe); }
Tensor lt(const Tensor& a, double b) { return binary_scalar("lt", a, b, Result::boolean, kLt); }
Tensor le(const Tensor& a, double b) { return binary_scalar("le", a, b, Result::boolean, kLe); }
Tensor gt(const Tensor& a, double b) { return binary_scalar("gt", a, b, Result::boolean, kGt); }
Tensor ge(const Tensor& a, double b) { return binary_scalar("ge", a, b, Result::boolean, kGe); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_cpu("where", {&cond, &a, &b});
  KILN_CHECK(cond.dtype() == DType::b8, "where: condition must be bool, got ", cond.dtype());
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  DType dt = promote_types(a.dtype(), b.dtype());
  Tensor c = cond.expand(shape), ae = a.to(dt).expand(shape), be = b.to(dt).expand(shape);
  Tensor out = empty(shape, dt);
  dispatch_all(dt, "where", [&]<class T>() {
    cpu::map_kernel<T, bool, T, T>(out, {&c, &ae, &be}, [](bool k, auto x, auto y) { return k ? x : y; });
  });
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_cpu("masked_fill", {&x, &mask});
  KILN_CHECK(mask.dtype() == DType::b8, "masked_fill: mask must be bool, got ", mask.dtype());
  KILN_CHECK(broadcast_shapes(x.shape(), mask.shape(), "masked_fill") == x.shape(), "masked_fill: mask of shape ",
             mask.shape(), " cannot be broadcast to the input's shape ", x.shape());
  Tensor m = mask.expand(x.shape());
  Tensor out = empty(x.shape(), x.dtype());
  dispatch_all(x.dtype(), "masked_fill", [&]<class T>() {
    const acc_t<T> v = static_cast<acc_t<T>>(value);
    cpu::map_kernel<T, T, bool>(out, {&x, &m}, [v](auto xv, bool k) { return k ? v : xv; });
  });
  return out;
}

// In-place: `b` broadcast to a's shape and converted to a's dtype.
template <class Op>
static Tensor& inplace(const char* name, Tensor& a, const Tensor& b, Op op) {
  check_cpu(name, {&a, &b});
  KILN_CHECK(broadcast_shapes(a.shape(), b.shape(), name) == a.shape(), name, ": operand of shape ", b.shape(),
             " cannot be broadcast to the in-place target's shape ", a.shape());
  Tensor be = b.to(a.dtype());
  if (be.storage() == a.storage() && !(be.shape() == a.shape() && be.strides() == a.strides() &&
                                       be.offset() == a.offset()))
    be = be.clone();  // partial overlap: read a stable copy
  be = be.expand(a.shape());
  dispatch_numeric(a.dtype(), name, [&]<class T>() { cpu::map_kernel<T, T, T>(a, {&a, &be}, op); });
  return a;
}

Tensor& add_(Tensor& a, const Tensor& b, double alpha) {
  if (alpha == 1.0) return inplace("add_", a, b, kAdd);
  return inplace("add_", a, b, [alpha](auto x, auto y) { return decltype(x)(x + decltype(x)(alpha) * y); });
}
Tensor& mul_(Tensor& a, const Tensor& b) { return inplace("mul_", a, b, kMul); }
Tensor& mul_(Tensor& a, double b) {
  check_defined(a, "mul_");
  return inplace("mul_", a, scalar_tensor(b, TensorOptions(a.dtype()).device(a.device())), kMul);
}

}  // namespace kiln::ops
