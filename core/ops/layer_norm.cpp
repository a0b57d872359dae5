// Layer norm fronts: shape checks, then the kernels of the operands' backend (core/cpu/layer_norm.cpp,
// core/cuda/kernels/layer_norm.cu) through one dispatch line (Note [One dispatch line]).
#include <kiln/core/ops/layer_norm.h>

#include <algorithm>

#include <kiln/core/cpu/layer_norm.h>
#include <kiln/core/cuda/kernels/layer_norm.h>
#include <kiln/core/ops/backend.h>

namespace kiln::ops {

namespace {

// Checks shapes and returns n = numel(normalized_shape).
int64_t check_layer_norm(const char* op, const Tensor& x, const Shape& ns, const Tensor& weight,
                         const Tensor& bias) {
  KILN_CHECK(!ns.empty(), op, ": normalized_shape must have at least one dim (input of shape ", x.shape(), ")");
  bool trailing = x.dim() >= ns.ndim() && std::equal(ns.begin(), ns.end(), x.shape().end() - ns.ndim());
  KILN_CHECK(trailing, op, ": normalized_shape ", ns, " does not match the trailing dims of the input of shape ",
             x.shape());
  if (weight.defined())
    KILN_CHECK(weight.shape() == ns, op, ": weight has shape ", weight.shape(), " but normalized_shape is ", ns);
  if (bias.defined())
    KILN_CHECK(bias.shape() == ns, op, ": bias has shape ", bias.shape(), " but normalized_shape is ", ns);
  return shape_numel(ns);
}

void check_stats(const char* op, const Tensor& t, const char* name, int64_t rows) {
  check_defined(t, op, name);
  KILN_CHECK(t.numel() == rows, op, ": ", name, " has ", t.numel(), " elements (shape ", t.shape(),
             ") but the input has ", rows, " rows");
  KILN_CHECK(is_floating(t.dtype()), op, ": ", name, " must be floating, got ", t.dtype());
}

}  // namespace

LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                           double eps) {
  check_defined(x, "layer_norm");
  const int64_t n = check_layer_norm("layer_norm", x, normalized_shape, weight, bias);
  return dispatch_device(
      "layer_norm", {&x, weight.defined() ? &weight : &x, bias.defined() ? &bias : &x},
      [&] { return cuda::layer_norm(x, n, weight, bias, eps); },
      [&] { return cpu::layer_norm(x, n, weight, bias, eps); });
}

LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, const Shape& normalized_shape, bool with_bias) {
  const char* op = "layer_norm_backward";
  check_defined(grad_out, op, "grad_out");
  check_defined(x, op);
  const int64_t n = check_layer_norm(op, x, normalized_shape, weight, Tensor());
  KILN_CHECK(grad_out.shape() == x.shape(), op, ": grad_out has shape ", grad_out.shape(), " but the input has shape ",
             x.shape());
  KILN_CHECK(grad_out.dtype() == x.dtype(), op, ": grad_out is ", grad_out.dtype(), " but the input is ", x.dtype());
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  check_stats(op, mean, "mean", rows);
  check_stats(op, rstd, "rstd", rows);
  return dispatch_device(
      op, {&x, &grad_out, &mean, &rstd, weight.defined() ? &weight : &x},
      [&] { return cuda::layer_norm_backward(grad_out, x, mean, rstd, weight, normalized_shape, with_bias); },
      [&] { return cpu::layer_norm_backward(grad_out, x, mean, rstd, weight, normalized_shape, with_bias); });
}

}  // namespace kiln::ops
