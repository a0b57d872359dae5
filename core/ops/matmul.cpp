// Matrix products: argument checks and shapes for both devices, then one dispatch line (Note [One
// dispatch line]) to the GEMM of the operands' backend: Eigen on the CPU (core/cpu/matmul.cpp),
// cuBLASLt on CUDA (core/cuda/kernels/matmul.cpp).
#include <kiln/core/ops/matmul.h>

#include <kiln/core/cpu/matmul.h>
#include <kiln/core/cuda/kernels/matmul.h>
#include <kiln/core/ops/backend.h>
#include <kiln/core/ops/elementwise.h>

namespace kiln::ops {

namespace {

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  on_cuda(op, {&a, &b});  // both defined, on one device
  KILN_CHECK_VALUE(is_floating(a.dtype()) && is_floating(b.dtype()), op,
                   ": expected floating-point operands (f32, f64, bf16, f16), got ", a.dtype(), " and ", b.dtype(),
                   "; convert integer tensors with .to(DType::f32)");
  KILN_CHECK_VALUE(a.dtype() == b.dtype(), op, ": expected operands of one dtype, got ", a.dtype(), " and ", b.dtype());
}

// The batch shape of a2 (..., M, K) @ b2 (..., K, N): the broadcast of their batch dims, after
// checking K. `a_shape`/`b_shape` are the caller's shapes, for the error message.
Shape product_batch(const char* op, const Tensor& a2, const Tensor& b2, const Shape& a_shape, const Shape& b_shape) {
  const int64_t da = a2.dim(), db = b2.dim();
  const int64_t k = a2.shape()[da - 1];
  KILN_CHECK_VALUE(b2.shape()[db - 2] == k, op, ": inner dimensions do not match: ", a_shape, " @ ", b_shape, " (",
                   k, " vs ", b2.shape()[db - 2], ")");
  return broadcast_shapes(Shape(a2.shape().begin(), a2.shape().end() - 2),
                          Shape(b2.shape().begin(), b2.shape().end() - 2), op);
}

// a2 (..., M, K) @ b2 (..., K, N) with broadcast batch dims (+ bias (N)): (batch..., M, N) in a2's
// dtype. `a_shape`/`b_shape` are the caller's shapes, for the error message.
Tensor product(const char* op, const Tensor& a2, const Tensor& b2, const Tensor& bias, const Shape& a_shape,
               const Shape& b_shape) {
  const Shape batch = product_batch(op, a2, b2, a_shape, b_shape);
  return dispatch_device(op, a2.device(), [&] { return cuda::gemm(a2, b2, bias, batch); },
                         [&] { return KILN_CPU_KERNEL(gemm)(a2, b2, bias, batch); });
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_operands("matmul", a, b);
  KILN_CHECK_VALUE(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dim, got shapes ", a.shape(),
                   " and ", b.shape());
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;  // a row (1, K)
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;  // a column (K, 1)
  Tensor out = product("matmul", a2, b2, Tensor(), a.shape(), b.shape());
  Shape s(out.shape().begin(), out.shape().end() - 2);
  if (a.dim() > 1) s.push_back(out.shape()[out.dim() - 2]);
  if (b.dim() > 1) s.push_back(out.shape()[out.dim() - 1]);
  return out.view(s);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_operands("bmm", a, b);
  KILN_CHECK_VALUE(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D operands (B, M, K) and (B, K, N), got shapes ",
                   a.shape(), " and ", b.shape());
  KILN_CHECK_VALUE(a.shape()[0] == b.shape()[0], "bmm: batch sizes differ: ", a.shape(), " and ", b.shape());
  return product("bmm", a, b, Tensor(), a.shape(), b.shape());
}

Tensor mm(const Tensor& a, const Tensor& b) {
  check_operands("mm", a, b);
  KILN_CHECK_VALUE(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D operands, got shapes ", a.shape(), " and ",
                   b.shape());
  return product("mm", a, b, Tensor(), a.shape(), b.shape());
}

namespace {

// x (..., in), weight (out, in), bias (out) or undefined: one device, one dtype.
void check_linear(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_operands(op, x, weight);
  KILN_CHECK_VALUE(weight.dim() == 2, op, ": weight must be 2-D (out_features, in_features), got shape ", weight.shape());
  KILN_CHECK_VALUE(x.dim() >= 1, op, ": input must have at least 1 dim, got shape ", x.shape());
  KILN_CHECK_VALUE(x.shape().back() == weight.shape()[1], op, ": input's last dim ", x.shape().back(),
                   " does not match in_features ", weight.shape()[1], " (input ", x.shape(), ", weight ", weight.shape(),
                   ")");
  if (bias.defined()) {
    on_cuda(op, {&x, &bias});
    KILN_CHECK_VALUE(bias.dim() == 1 && bias.shape()[0] == weight.shape()[0], op, ": bias must have shape [",
                     weight.shape()[0], "], got ", bias.shape());
    KILN_CHECK_VALUE(bias.dtype() == x.dtype(), op, ": bias dtype ", bias.dtype(), " differs from the input's ", x.dtype());
  }
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear("linear", x, weight, bias);
  const Tensor x2 = x.dim() == 1 ? x.unsqueeze(0) : x;
  Tensor out = product("linear", x2, weight.t(), bias, x.shape(), weight.shape());
  return x.dim() == 1 ? out.squeeze(0) : out;
}

LinearGelu linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear("linear_gelu", x, weight, bias);
  const Tensor x2 = x.dim() == 1 ? x.unsqueeze(0) : x;
  const Tensor wt = weight.t();
  const Shape batch = product_batch("linear_gelu", x2, wt, x.shape(), weight.shape());
  if (auto fused = dispatch_device("linear_gelu", x.device(), [&] { return cuda::gemm_gelu(x2, wt, bias, batch); },
                                   [&] { return KILN_CPU_KERNEL(gemm_gelu)(x2, wt, bias, batch); })) {
    if (x.dim() == 1) return {fused->out.squeeze(0), fused->pre_gelu.squeeze(0)};
    return {fused->out, fused->pre_gelu};
  }
  Tensor pre = linear(x, weight, bias);
  return {gelu_tanh(pre), pre};
}

}  // namespace kiln::ops
