// Elementwise ops, one front for both devices: type promotion and broadcasting here, then the CPU
// loops (core/cpu/loops.h) or the CUDA launchers (core/cuda/kernels/elementwise.h), which get operands
// already broadcast and converted to the dtype the op computes in.
#include <kiln/core/ops/elementwise.h>

#include <cmath>
#include <optional>
#include <type_traits>

#include <kiln/core/cpu/loops.h>
#include <kiln/core/cpu/vec_math.h>
#include <kiln/core/cuda/kernels/elementwise.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/common.h>

namespace kiln::ops {

namespace {

DType float_result(DType t) { return is_floating(t) ? t : DType::f32; }

// Note [CPU scalars meet CUDA tensors]
// As in torch, a 0-dim CPU tensor may be an operand of an op on CUDA tensors: it acts as a
// scalar (autograd's backward formulas build such constants with zeros({}) and full({}, v)).
// Binary ops pass its value to the kernel; elsewhere it becomes a 0-dim device tensor by a fill
// kernel (no host sync). Any other mix of devices is an error naming both.
bool is_cpu_scalar(const Tensor& t) { return t.dim() == 0 && t.device().is_cpu(); }

// The device an op runs on: its operands', CPU scalars giving way to CUDA tensors.
Device op_device(const char* name, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  int i = 0;
  for (const Tensor* t : ts) {
    KILN_CHECK(t->defined(), name, ": argument ", i, " is an undefined tensor");
    ++i;
    if (is_cpu_scalar(*t)) continue;
    if (first) check_same_device(name, *first, *t);
    else first = t;
  }
  return first ? first->device() : Device::cpu();
}

// Operand `t` on `dev` in dtype `dt` (a CPU scalar is filled into a 0-dim device tensor).
Tensor operand(const Tensor& t, Device dev, DType dt) {
  if (dev.is_cuda() && is_cpu_scalar(t)) return full({}, t.item(), TensorOptions(dt).device(dev));
  return t.to(dt);
}

// The CUDA launchers by op family (discarded in a build without CUDA).
void launch(cuda::BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if constexpr (cuda::kBuilt) cuda::binary(op, out, a, b);
}
void launch(cuda::CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if constexpr (cuda::kBuilt) cuda::compare(op, out, a, b);
}
void launch_scalar(cuda::BinaryOp op, const Tensor& out, const Tensor& a, double s) {
  if constexpr (cuda::kBuilt) cuda::binary_scalar(op, out, a, s);
}
void launch_scalar(cuda::CompareOp op, const Tensor& out, const Tensor& a, double s) {
  if constexpr (cuda::kBuilt) cuda::compare_scalar(op, out, a, s);
}
// op' with op(s, x) == op'(x, s) exactly, for a scalar on the left.
std::optional<cuda::BinaryOp> mirrored(cuda::BinaryOp op) {
  switch (op) {
    case cuda::BinaryOp::add: return cuda::BinaryOp::add;
    case cuda::BinaryOp::mul: return cuda::BinaryOp::mul;
    case cuda::BinaryOp::sub: return cuda::BinaryOp::rsub;
    default: return std::nullopt;  // maximum/minimum: which of two equal zeros wins would flip
  }
}
std::optional<cuda::CompareOp> mirrored(cuda::CompareOp op) {
  switch (op) {
    case cuda::CompareOp::lt: return cuda::CompareOp::gt;
    case cuda::CompareOp::le: return cuda::CompareOp::ge;
    case cuda::CompareOp::gt: return cuda::CompareOp::lt;
    case cuda::CompareOp::ge: return cuda::CompareOp::le;
    default: return op;
  }
}

template <class Op>
Tensor unary_float(const char* name, cuda::UnaryOp cop, const Tensor& x, Op op) {
  check_defined(x, name);
  DType dt = float_result(x.dtype());
  Tensor in = x.to(dt);
  Tensor out = empty(x.shape(), dt, x.device());
  if constexpr (cuda::kBuilt) if (x.device().is_cuda()) {
    cuda::unary(cop, out, in);
    return out;
  }
  check_cpu(name, {&x});
  dispatch_floating(dt, name, [&]<class T>() { cpu::map_kernel<T, T>(out, {&in}, op); });
  return out;
}

template <class Op>
Tensor unary_numeric(const char* name, cuda::UnaryOp cop, const Tensor& x, Op op) {
  check_defined(x, name);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if constexpr (cuda::kBuilt) if (x.device().is_cuda()) {
    cuda::unary(cop, out, x);
    return out;
  }
  check_cpu(name, {&x});
  dispatch_numeric(x.dtype(), name, [&]<class T>() { cpu::map_kernel<T, T>(out, {&x}, op); });
  return out;
}

enum class Result { promoted, floating, boolean };

// out (of `shape` and `result` dtype, on CUDA) = op(a, b) computed in `compute`.
template <class CudaOp>
Tensor binary_cuda(CudaOp cop, const Tensor& a, const Tensor& b, const Shape& shape, DType compute, DType result,
                   Device dev) {
  Tensor out = empty(shape, result, dev);
  if (is_cpu_scalar(b)) {
    launch_scalar(cop, out, a.to(compute), b.item());  // a is the CUDA tensor, of `shape`
    return out;
  }
  if (is_cpu_scalar(a)) {
    if (std::optional<CudaOp> m = mirrored(cop)) {
      launch_scalar(*m, out, b.to(compute), a.item());
      return out;
    }
  }
  launch(cop, out, operand(a, dev, compute).expand(shape), operand(b, dev, compute).expand(shape));
  return out;
}

template <class CudaOp, class Op>
Tensor binary(const char* name, CudaOp cop, const Tensor& a, const Tensor& b, Result kind, Op op) {
  const Device dev = op_device(name, {&a, &b});
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  DType compute = promote_types(a.dtype(), b.dtype());
  if (kind == Result::floating) compute = float_result(compute);
  const DType result = kind == Result::boolean ? DType::b8 : compute;
  if constexpr (cuda::kBuilt) if (dev.is_cuda()) return binary_cuda(cop, a, b, shape, compute, result, dev);
  check_cpu(name, {&a, &b});
  Tensor ae = a.to(compute).expand(shape), be = b.to(compute).expand(shape);
  Tensor out = empty(shape, result);
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

// On CUDA the scalar goes to the kernel by value, rounded there to the compute dtype exactly as
// the CPU's 0-dim scalar_tensor(b, compute) rounds it.
template <class CudaOp, class Op>
Tensor binary_scalar(const char* name, CudaOp cop, const Tensor& a, double b, Result kind, Op op) {
  check_defined(a, name);
  DType compute = scalar_compute(a, b);
  if constexpr (cuda::kBuilt) if (a.device().is_cuda()) {
    if (kind == Result::floating) compute = float_result(compute);
    Tensor out = empty(a.shape(), kind == Result::boolean ? DType::b8 : compute, a.device());
    launch_scalar(cop, out, a.to(compute), b);
    return out;
  }
  return binary(name, cop, a.to(compute), scalar_tensor(b, TensorOptions(compute)), kind, op);
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

using U = cuda::UnaryOp;
using B = cuda::BinaryOp;
using C = cuda::CompareOp;

}  // namespace

Tensor neg(const Tensor& x) { return unary_numeric("neg", U::neg, x, [](auto v) { return decltype(v)(-v); }); }
Tensor abs(const Tensor& x) {
  return unary_numeric("abs", U::abs, x, [](auto v) {
    if constexpr (std::is_unsigned_v<decltype(v)>) return v; else return v < 0 ? decltype(v)(-v) : v;
  });
}
Tensor relu(const Tensor& x) {
  return unary_numeric("relu", U::relu, x, [](auto v) { return v < 0 ? decltype(v)(0) : v; });
}
Tensor square(const Tensor& x) {
  return unary_numeric("square", U::square, x, [](auto v) { return decltype(v)(v * v); });
}

Tensor exp(const Tensor& x) { return unary_float("exp", U::exp, x, [](auto v) { return cpu::exp_any(v); }); }
Tensor log(const Tensor& x) { return unary_float("log", U::log, x, [](auto v) { return std::log(v); }); }
Tensor sqrt(const Tensor& x) { return unary_float("sqrt", U::sqrt, x, [](auto v) { return std::sqrt(v); }); }
Tensor rsqrt(const Tensor& x) {
  return unary_float("rsqrt", U::rsqrt, x, [](auto v) { return decltype(v)(1) / std::sqrt(v); });
}
Tensor tanh(const Tensor& x) { return unary_float("tanh", U::tanh, x, [](auto v) { return std::tanh(v); }); }
Tensor sigmoid(const Tensor& x) {
  return unary_float("sigmoid", U::sigmoid, x,
                     [](auto v) { return decltype(v)(1) / (decltype(v)(1) + cpu::exp_any(-v)); });
}
Tensor gelu_tanh(const Tensor& x) {
  return unary_float("gelu_tanh", U::gelu_tanh, x, [](auto v) {
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
  return unary_float("gelu_erf", U::gelu_erf, x, [](auto v) {
    using T = decltype(v);
    return T(0.5) * v * (T(1) + std::erf(v * T(0.70710678118654752440)));
  });
}

Tensor add(const Tensor& a, const Tensor& b) { return binary("add", B::add, a, b, Result::promoted, kAdd); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary("sub", B::sub, a, b, Result::promoted, kSub); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary("mul", B::mul, a, b, Result::promoted, kMul); }
Tensor div(const Tensor& a, const Tensor& b) { return binary("div", B::div, a, b, Result::floating, kDiv); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary("pow", B::pow, a, b, Result::promoted, kPow); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary("maximum", B::maximum, a, b, Result::promoted, kMax); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary("minimum", B::minimum, a, b, Result::promoted, kMin); }

Tensor add(const Tensor& a, double b) { return binary_scalar("add", B::add, a, b, Result::promoted, kAdd); }
Tensor sub(const Tensor& a, double b) { return binary_scalar("sub", B::sub, a, b, Result::promoted, kSub); }
Tensor rsub(const Tensor& a, double b) {
  return binary_scalar("rsub", B::rsub, a, b, Result::promoted, [](auto x, auto y) { return y - x; });
}
Tensor mul(const Tensor& a, double b) { return binary_scalar("mul", B::mul, a, b, Result::promoted, kMul); }
Tensor div(const Tensor& a, double b) {
  check_defined(a, "div");
  return binary_scalar("div", B::div, a.to(float_result(a.dtype())), b, Result::floating, kDiv);
}
Tensor pow(const Tensor& a, double e) {
  if (e == 2.0) return square(a);
  return binary_scalar("pow", B::pow, a, e, Result::promoted, kPow);
}
Tensor maximum(const Tensor& a, double b) { return binary_scalar("maximum", B::maximum, a, b, Result::promoted, kMax); }
Tensor minimum(const Tensor& a, double b) { return binary_scalar("minimum", B::minimum, a, b, Result::promoted, kMin); }

Tensor eq(const Tensor& a, const Tensor& b) { return binary("eq", C::eq, a, b, Result::boolean, kEq); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary("ne", C::ne, a, b, Result::boolean, kNe); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary("lt", C::lt, a, b, Result::boolean, kLt); }
Tensor le(const Tensor& a, const Tensor& b) { return binary("le", C::le, a, b, Result::boolean, kLe); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary("gt", C::gt, a, b, Result::boolean, kGt); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary("ge", C::ge, a, b, Result::boolean, kGe); }
Tensor eq(const Tensor& a, double b) { return binary_scalar("eq", C::eq, a, b, Result::boolean, kEq); }
Tensor ne(const Tensor& a, double b) { return binary_scalar("ne", C::ne, a, b, Result::boolean, kNe); }
Tensor lt(const Tensor& a, double b) { return binary_scalar("lt", C::lt, a, b, Result::boolean, kLt); }
Tensor le(const Tensor& a, double b) { return binary_scalar("le", C::le, a, b, Result::boolean, kLe); }
Tensor gt(const Tensor& a, double b) { return binary_scalar("gt", C::gt, a, b, Result::boolean, kGt); }
Tensor ge(const Tensor& a, double b) { return binary_scalar("ge", C::ge, a, b, Result::boolean, kGe); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Device dev = op_device("where", {&cond, &a, &b});
  KILN_CHECK(cond.dtype() == DType::b8, "where: condition must be bool, got ", cond.dtype());
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  DType dt = promote_types(a.dtype(), b.dtype());
  if constexpr (cuda::kBuilt) if (dev.is_cuda()) {
    Tensor out = empty(shape, dt, dev);
    cuda::where(out, operand(cond, dev, DType::b8).expand(shape), operand(a, dev, dt).expand(shape),
                operand(b, dev, dt).expand(shape));
    return out;
  }
  check_cpu("where", {&cond, &a, &b});
  Tensor c = cond.expand(shape), ae = a.to(dt).expand(shape), be = b.to(dt).expand(shape);
  Tensor out = empty(shape, dt);
  dispatch_all(dt, "where", [&]<class T>() {
    cpu::map_kernel<T, bool, T, T>(out, {&c, &ae, &be}, [](bool k, auto x, auto y) { return k ? x : y; });
  });
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  const Device dev = op_device("masked_fill", {&x, &mask});
  KILN_CHECK(mask.dtype() == DType::b8, "masked_fill: mask must be bool, got ", mask.dtype());
  KILN_CHECK(broadcast_shapes(x.shape(), mask.shape(), "masked_fill") == x.shape(), "masked_fill: mask of shape ",
             mask.shape(), " cannot be broadcast to the input's shape ", x.shape());
  if constexpr (cuda::kBuilt) if (dev.is_cuda()) {
    Tensor out = empty(x.shape(), x.dtype(), dev);
    cuda::masked_fill(out, operand(x, dev, x.dtype()), operand(mask, dev, DType::b8).expand(x.shape()), value);
    return out;
  }
  check_cpu("masked_fill", {&x, &mask});
  Tensor m = mask.expand(x.shape());
  Tensor out = empty(x.shape(), x.dtype());
  dispatch_all(x.dtype(), "masked_fill", [&]<class T>() {
    const acc_t<T> v = static_cast<acc_t<T>>(value);
    cpu::map_kernel<T, T, bool>(out, {&x, &m}, [v](auto xv, bool k) { return k ? v : xv; });
  });
  return out;
}

// The operand of an in-place op on `a`: `b` broadcast to a's shape and converted to a's dtype,
// copied first when it partially overlaps `a` (so every element reads a stable value).
static Tensor inplace_operand(const char* name, const Tensor& a, const Tensor& b) {
  const Device dev = op_device(name, {&a, &b});
  KILN_CHECK(dev == a.device(), name, ": cannot write the result on ", dev, " into a tensor on ", a.device());
  KILN_CHECK(broadcast_shapes(a.shape(), b.shape(), name) == a.shape(), name, ": operand of shape ", b.shape(),
             " cannot be broadcast to the in-place target's shape ", a.shape());
  Tensor be = operand(b, dev, a.dtype());
  if (be.storage() == a.storage() && !(be.shape() == a.shape() && be.strides() == a.strides() &&
                                       be.offset() == a.offset()))
    be = be.clone();  // partial overlap: read a stable copy
  return be.expand(a.shape());
}

template <class Op>
static Tensor& inplace(const char* name, Tensor& a, const Tensor& b, Op op) {
  Tensor be = inplace_operand(name, a, b);
  check_cpu(name, {&a, &be});
  dispatch_numeric(a.dtype(), name, [&]<class T>() { cpu::map_kernel<T, T, T>(a, {&a, &be}, op); });
  return a;
}

Tensor& add_(Tensor& a, const Tensor& b, double alpha) {
  if constexpr (cuda::kBuilt) if (a.defined() && a.device().is_cuda()) {
    Tensor be = inplace_operand("add_", a, b);
    if (alpha == 1.0) cuda::binary(B::add, a, a, be);
    else cuda::add_scaled(a, a, be, alpha);
    return a;
  }
  if (alpha == 1.0) return inplace("add_", a, b, kAdd);
  return inplace("add_", a, b, [alpha](auto x, auto y) { return decltype(x)(x + decltype(x)(alpha) * y); });
}
Tensor& mul_(Tensor& a, const Tensor& b) {
  if constexpr (cuda::kBuilt) if (a.defined() && a.device().is_cuda()) {
    cuda::binary(B::mul, a, a, inplace_operand("mul_", a, b));
    return a;
  }
  return inplace("mul_", a, b, kMul);
}
Tensor& mul_(Tensor& a, double b) {
  check_defined(a, "mul_");
  if constexpr (cuda::kBuilt) if (a.device().is_cuda()) {
    cuda::binary_scalar(B::mul, a, a, b);  // b rounded to a's dtype, as scalar_tensor(b, a.dtype()) is
    return a;
  }
  return inplace("mul_", a, scalar_tensor(b, TensorOptions(a.dtype())), kMul);
}

// GELU backward, fused (autograd uses it on both devices). tanh: with s = (1 + tanh u) / 2 =
// 1 / (1 + exp(-2u)), u = c (x + a x^3), d/dx gelu = s + 2 x s (1 - s) c (1 + 3 a x^2), which
// stays finite in both tails; the CUDA functors (core/cuda/kernels/elementwise_functors.cuh) match.
Tensor gelu_tanh_backward(const Tensor& grad, const Tensor& x) {
  return binary("gelu_tanh_backward", B::gelu_tanh_backward, grad, x, Result::floating, [](auto g, auto v) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>) {
      const T c = T(0.7978845608028654), a = T(0.044715);
      const T v2 = v * v;
      const T u = c * (v + a * v2 * v);
      const T s = T(1) / (T(1) + cpu::exp_any(T(-2) * u));
      return T(g * (s + T(2) * v * s * (T(1) - s) * c * (T(1) + T(3) * a * v2)));
    } else {
      return g;  // never reached: Result::floating computes in a float type
    }
  });
}
// d/dx x Phi(x) = Phi(x) + x phi(x).
Tensor gelu_erf_backward(const Tensor& grad, const Tensor& x) {
  return binary("gelu_erf_backward", B::gelu_erf_backward, grad, x, Result::floating, [](auto g, auto v) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>) {
      const T cdf = T(0.5) * (T(1) + std::erf(v * T(0.70710678118654752440)));
      const T pdf = cpu::exp_any(T(-0.5) * v * v) * T(0.39894228040143267794);  // 1 / sqrt(2 pi)
      return T(g * (cdf + v * pdf));
    } else {
      return g;
    }
  });
}

}  // namespace kiln::ops
