// Elementwise ops with numpy broadcasting, on the CPU and CUDA. Binary ops promote dtypes like
// torch (i32 + f32 -> f32); float functions (exp, log, ...) turn integer inputs into f32;
// comparisons return bool. 16-bit floats are computed in float and rounded once. Operands share a
// device, except that a 0-dim CPU tensor may meet CUDA tensors as a scalar (as in torch).
#pragma once

#include <kiln/core/ops/elementwise_op.h>
#include <kiln/core/tensor.h>

namespace kiln::ops {

// The ops of core/ops/elementwise_op.h's lists, each declared once per form:
//   unary        neg abs exp log sqrt rsqrt tanh sigmoid relu gelu_tanh (GELU, tanh approximation as
//                in GPT-2) gelu_erf (GELU, exact) square sin cos
//   binary       add sub mul div pow maximum minimum: tensor-tensor (broadcasting) and tensor-scalar;
//                rsub(a, b) = b - a, scalar only
//   comparisons  eq ne lt le gt ge (bool result): tensor-tensor and tensor-scalar
#define KILN_DECLARE_UNARY(name) Tensor name(const Tensor& x);
#define KILN_DECLARE_BINARY(name) \
  Tensor name(const Tensor& a, const Tensor& b); \
  Tensor name(const Tensor& a, double b);
KILN_UNARY_OPS(KILN_DECLARE_UNARY)
KILN_COMPARE_OPS(KILN_DECLARE_BINARY)
KILN_DECLARE_BINARY(add)
KILN_DECLARE_BINARY(sub)
KILN_DECLARE_BINARY(mul)
KILN_DECLARE_BINARY(div)
KILN_DECLARE_BINARY(pow)
KILN_DECLARE_BINARY(maximum)
KILN_DECLARE_BINARY(minimum)
#undef KILN_DECLARE_UNARY
#undef KILN_DECLARE_BINARY
Tensor rsub(const Tensor& a, double b);

// Selection: cond ? a : b (cond is bool; all three broadcast), and x with mask positions = value.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// In place on `a` (no broadcasting of `a` itself; `b` broadcasts to a's shape). a += alpha * b.
Tensor& add_(Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor& mul_(Tensor& a, const Tensor& b);
Tensor& mul_(Tensor& a, double b);

// GELU backward, fused: grad * d/dx gelu(x) (floating result, grad and x broadcast).
Tensor gelu_tanh_backward(const Tensor& grad, const Tensor& x);
Tensor gelu_erf_backward(const Tensor& grad, const Tensor& x);

}  // namespace kiln::ops
