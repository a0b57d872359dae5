// Elementwise ops, one front for both devices: type promotion and broadcasting here, then the CPU
// kernels (core/cpu/elementwise.h) or the CUDA launchers (core/cuda/kernels/elementwise.h) through one
// dispatch line (Note [One dispatch line]); both get operands already broadcast and converted to
// the dtype the op computes in.
#include <kiln/core/ops/elementwise.h>

#include <cmath>
#include <optional>
#include <type_traits>

#include <kiln/core/cpu/elementwise.h>
#include <kiln/core/cuda/kernels/elementwise.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/backend.h>
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
    KILN_CHECK_VALUE(t->defined(), name, ": argument ", i, " is an undefined tensor");
    check_in_storage(*t, name, i);  // Note [Reads within the storage]
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

// The kernels by op family. The CUDA ones are reached from the CUDA branch of a dispatch line
// inside the templates below, whose lambdas a compiler may still emit at -O0; the kBuilt test keeps
// a build without CUDA from naming the launchers even then (Note [One dispatch line]).
template <class Op>
void launch(Op op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if constexpr (!cuda::kBuilt) return;
  else if constexpr (std::is_same_v<Op, BinaryOp>) cuda::binary(op, out, a, b);
  else cuda::compare(op, out, a, b);
}
template <class Op>
void launch_scalar(Op op, const Tensor& out, const Tensor& a, double s) {
  if constexpr (!cuda::kBuilt) return;
  else if constexpr (std::is_same_v<Op, BinaryOp>) cuda::binary_scalar(op, out, a, s);
  else cuda::compare_scalar(op, out, a, s);
}
template <class Op>
void launch_cpu(const char* name, Op op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if constexpr (std::is_same_v<Op, BinaryOp>) KILN_CPU_KERNEL(binary)(name, op, out, a, b);
  else KILN_CPU_KERNEL(compare)(name, op, out, a, b);
}
// op' with op(s, x) == op'(x, s) exactly, for a scalar on the left.
std::optional<BinaryOp> mirrored(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return BinaryOp::add;
    case BinaryOp::mul: return BinaryOp::mul;
    case BinaryOp::sub: return BinaryOp::rsub;
    default: return std::nullopt;  // maximum/minimum: which of two equal zeros wins would flip
  }
}
std::optional<CompareOp> mirrored(CompareOp op) {
  switch (op) {
    case CompareOp::lt: return CompareOp::gt;
    case CompareOp::le: return CompareOp::ge;
    case CompareOp::gt: return CompareOp::lt;
    case CompareOp::ge: return CompareOp::le;
    default: return op;
  }
}

// Ops that compute in x's own dtype; the others are float functions (integers compute in f32).
bool keeps_dtype(UnaryOp op) {
  return op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::relu || op == UnaryOp::square;
}

// out = op(x).
Tensor unary(UnaryOp op, const Tensor& x) {
  const char* name = op_name(op);
  check_defined(x, name);
  check_in_storage(x, name, 0);  // before x.to(dt) reads it
  DType dt = keeps_dtype(op) ? x.dtype() : float_result(x.dtype());
  Tensor in = x.to(dt);
  Tensor out = empty(x.shape(), dt, x.device());
  dispatch_device(name, {&x}, [&] { cuda::unary(op, out, in); }, [&] { KILN_CPU_KERNEL(unary)(name, op, out, in); });
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

// The same on the CPU.
template <class Op>
Tensor binary_cpu(const char* name, Op op, const Tensor& a, const Tensor& b, const Shape& shape, DType compute,
                  DType result) {
  check_cpu(name, {&a, &b});
  Tensor ae = a.to(compute).expand(shape), be = b.to(compute).expand(shape);
  Tensor out = empty(shape, result);
  launch_cpu(name, op, out, ae, be);
  return out;
}

// The result of a comparison (kind boolean) or binary op, broadcast and promoted.
template <class Op>
Tensor binary(Op op, const Tensor& a, const Tensor& b, Result kind) {
  const char* name = op_name(op);
  const Device dev = op_device(name, {&a, &b});
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  DType compute = promote_types(a.dtype(), b.dtype());
  if (kind == Result::floating) compute = float_result(compute);
  const DType result = kind == Result::boolean ? DType::b8 : compute;
  return dispatch_device(name, dev, [&] { return binary_cuda(op, a, b, shape, compute, result, dev); },
                         [&] { return binary_cpu(name, op, a, b, shape, compute, result); });
}

// The dtype a tensor-scalar op computes in: the tensor's, unless an integer tensor meets a
// fractional scalar (then f32), as torch does.
DType scalar_compute(const Tensor& a, double b) {
  if (is_floating(a.dtype())) return a.dtype();
  return (a.dtype() != DType::b8 && std::nearbyint(b) == b) ? a.dtype() : DType::f32;
}

// On CUDA the scalar goes to the kernel by value, rounded there to the compute dtype exactly as
// the CPU's 0-dim scalar_tensor(b, compute) rounds it.
template <class Op>
Tensor binary_scalar_cuda(Op op, const Tensor& a, double b, Result kind, DType compute) {
  if (kind == Result::floating) compute = float_result(compute);
  Tensor out = empty(a.shape(), kind == Result::boolean ? DType::b8 : compute, a.device());
  launch_scalar(op, out, a.to(compute), b);
  return out;
}

// On the CPU the scalar becomes a 0-dim tensor of the compute dtype (the tensor form's kernels).
template <class Op>
Tensor binary_scalar(Op op, const Tensor& a, double b, Result kind) {
  const char* name = op_name(op);
  check_defined(a, name);
  check_in_storage(a, name, 0);
  DType compute = scalar_compute(a, b);
  return dispatch_device(name, a.device(), [&] { return binary_scalar_cuda(op, a, b, kind, compute); },
                         [&] { return binary(op, a.to(compute), scalar_tensor(b, TensorOptions(compute)), kind); });
}

using U = UnaryOp;
using B = BinaryOp;
using C = CompareOp;

}  // namespace

// The fronts, one list entry each (core/ops/elementwise_op.h).
#define KILN_UNARY_FRONT(name) \
  Tensor name(const Tensor& x) { return unary(U::name, x); }
KILN_UNARY_OPS(KILN_UNARY_FRONT)
#undef KILN_UNARY_FRONT

#define KILN_COMPARE_FRONT(name)                                                                     \
  Tensor name(const Tensor& a, const Tensor& b) { return binary(C::name, a, b, Result::boolean); } \
  Tensor name(const Tensor& a, double b) { return binary_scalar(C::name, a, b, Result::boolean); }
KILN_COMPARE_OPS(KILN_COMPARE_FRONT)
#undef KILN_COMPARE_FRONT

// Binary ops whose tensor and scalar forms both compute in the promoted dtype.
#define KILN_BINARY_FRONT(name)                                                                       \
  Tensor name(const Tensor& a, const Tensor& b) { return binary(B::name, a, b, Result::promoted); } \
  Tensor name(const Tensor& a, double b) { return binary_scalar(B::name, a, b, Result::promoted); }
KILN_BINARY_FRONT(add)
KILN_BINARY_FRONT(sub)
KILN_BINARY_FRONT(mul)
KILN_BINARY_FRONT(maximum)
KILN_BINARY_FRONT(minimum)
#undef KILN_BINARY_FRONT

Tensor div(const Tensor& a, const Tensor& b) { return binary(B::div, a, b, Result::floating); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(B::pow, a, b, Result::promoted); }
Tensor rsub(const Tensor& a, double b) { return binary_scalar(B::rsub, a, b, Result::promoted); }
Tensor div(const Tensor& a, double b) {
  check_defined(a, "div");
  check_in_storage(a, "div", 0);
  return binary_scalar(B::div, a.to(float_result(a.dtype())), b, Result::floating);
}
Tensor pow(const Tensor& a, double e) {
  if (e == 2.0) return square(a);
  return binary_scalar(B::pow, a, e, Result::promoted);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Device dev = op_device("where", {&cond, &a, &b});
  KILN_CHECK_VALUE(cond.dtype() == DType::b8, "where: condition must be bool, got ", cond.dtype());
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  DType dt = promote_types(a.dtype(), b.dtype());
  Tensor out = empty(shape, dt, dev);
  Tensor c = operand(cond, dev, DType::b8).expand(shape), ae = operand(a, dev, dt).expand(shape),
         be = operand(b, dev, dt).expand(shape);
  dispatch_device("where", dev, [&] { cuda::where(out, c, ae, be); }, [&] {
    check_cpu("where", {&cond, &a, &b});
    KILN_CPU_KERNEL(where)(out, c, ae, be);
  });
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  const Device dev = op_device("masked_fill", {&x, &mask});
  KILN_CHECK_VALUE(mask.dtype() == DType::b8, "masked_fill: mask must be bool, got ", mask.dtype());
  KILN_CHECK_VALUE(broadcast_shapes(x.shape(), mask.shape(), "masked_fill") == x.shape(), "masked_fill: mask of shape ",
                   mask.shape(), " cannot be broadcast to the input's shape ", x.shape());
  Tensor out = empty(x.shape(), x.dtype(), dev);
  Tensor xd = operand(x, dev, x.dtype()), m = operand(mask, dev, DType::b8).expand(x.shape());
  dispatch_device("masked_fill", dev, [&] { cuda::masked_fill(out, xd, m, value); }, [&] {
    check_cpu("masked_fill", {&x, &mask});
    KILN_CPU_KERNEL(masked_fill)(out, xd, m, value);
  });
  return out;
}

// The operand of an in-place op on `a`: `b` broadcast to a's shape and converted to a's dtype,
// copied first when it partially overlaps `a` (so every element reads a stable value).
static Tensor inplace_operand(const char* name, const Tensor& a, const Tensor& b) {
  const Device dev = op_device(name, {&a, &b});
  KILN_CHECK(dev == a.device(), name, ": cannot write the result on ", dev, " into a tensor on ", a.device());
  KILN_CHECK_VALUE(broadcast_shapes(a.shape(), b.shape(), name) == a.shape(), name, ": operand of shape ", b.shape(),
                   " cannot be broadcast to the in-place target's shape ", a.shape());
  Tensor be = operand(b, dev, a.dtype());
  if (be.storage() == a.storage() && !(be.shape() == a.shape() && be.strides() == a.strides() &&
                                       be.offset() == a.offset()))
    be = be.clone();  // partial overlap: read a stable copy
  return be.expand(a.shape());
}

// a = a + alpha * b (add when alpha is 1) or a * b, in place.
static Tensor& inplace(const char* name, BinaryOp op, Tensor& a, const Tensor& b, double alpha = 1.0) {
  Tensor be = inplace_operand(name, a, b);
  const bool scaled = alpha != 1.0;
  dispatch_device(
      name, a.device(), [&] { scaled ? cuda::add_scaled(a, a, be, alpha) : cuda::binary(op, a, a, be); },
      [&] {
        check_cpu(name, {&a, &be});
        scaled ? KILN_CPU_KERNEL(add_scaled)(name, a, a, be, alpha) : KILN_CPU_KERNEL(binary)(name, op, a, a, be);
      });
  return a;
}

Tensor& add_(Tensor& a, const Tensor& b, double alpha) { return inplace("add_", B::add, a, b, alpha); }
Tensor& mul_(Tensor& a, const Tensor& b) { return inplace("mul_", B::mul, a, b); }
Tensor& mul_(Tensor& a, double b) {
  check_defined(a, "mul_");
  check_in_storage(a, "mul_", 0);
  // On CUDA, b goes to the kernel rounded to a's dtype, as scalar_tensor(b, a.dtype()) is.
  dispatch_device("mul_", a.device(), [&] { cuda::binary_scalar(B::mul, a, a, b); },
                  [&] { inplace("mul_", B::mul, a, scalar_tensor(b, TensorOptions(a.dtype()))); });
  return a;
}

// GELU backward, fused (autograd uses it on both devices); the formulas are core/formulas.h's.
Tensor gelu_tanh_backward(const Tensor& grad, const Tensor& x) {
  return binary(B::gelu_tanh_backward, grad, x, Result::floating);
}
Tensor gelu_erf_backward(const Tensor& grad, const Tensor& x) {
  return binary(B::gelu_erf_backward, grad, x, Result::floating);
}

}  // namespace kiln::ops
