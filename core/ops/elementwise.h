// Elementwise ops with numpy broadcasting, on the CPU and CUDA. Binary ops promote dtypes like
// torch (i32 + f32 -> f32); float functions (exp, log, ...) turn integer inputs into f32;
// comparisons return bool. 16-bit floats are computed in float and rounded once. Operands share a
// device, except that a 0-dim CPU tensor may meet CUDA tensors as a scalar (as in torch).
#pragma once

#include <kiln/core/tensor.h>

namespace kiln::ops {

// Unary.
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu_tanh(const Tensor& x);  // GELU, tanh approximation (GPT-2)
Tensor gelu_erf(const Tensor& x);   // GELU, exact (erf)
Tensor square(const Tensor& x);

// Binary, tensor-tensor (broadcasting) and tensor-scalar.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor rsub(const Tensor& a, double b);  // b - a
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, double b);
Tensor minimum(const Tensor& a, double b);

// Comparisons (bool result).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

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
