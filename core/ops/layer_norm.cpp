// Layer norm fronts: shape checks, then the kernels of the operands' backend (core/cpu/layer_norm.cpp,
// core/cuda/kernels/layer_norm.cu) through one dispatch line (Note [One dispatch line]).
#include <kiln/core/ops/layer_norm.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include <kiln/core/cpu/layer_norm.h>
#include <kiln/core/cuda/kernels/layer_norm.h>
#include <kiln/core/ops/backend.h>
#include <kiln/core/ops/elementwise.h>

namespace kiln::ops {

namespace {

// Checks shapes and returns n = numel(normalized_shape).
int64_t check_layer_norm(const char* op, const Tensor& x, const Shape& ns, const Tensor& weight,
                         const Tensor& bias) {
  KILN_CHECK_VALUE(!ns.empty(), op, ": normalized_shape must have at least one dim (input of shape ", x.shape(), ")");
  bool trailing = x.dim() >= ns.ndim() && std::equal(ns.begin(), ns.end(), x.shape().end() - ns.ndim());
  KILN_CHECK_VALUE(trailing, op, ": normalized_shape ", ns, " does not match the trailing dims of the input of shape ",
                   x.shape());
  if (weight.defined())
    KILN_CHECK_VALUE(weight.shape() == ns, op, ": weight has shape ", weight.shape(), " but normalized_shape is ", ns);
  if (bias.defined())
    KILN_CHECK_VALUE(bias.shape() == ns, op, ": bias has shape ", bias.shape(), " but normalized_shape is ", ns);
  return shape_numel(ns);
}

void check_stats(const char* op, const Tensor& t, const char* name, int64_t rows) {
  check_defined(t, op, name);
  KILN_CHECK_VALUE(t.numel() == rows, op, ": ", name, " has ", t.numel(), " elements (shape ", t.shape(),
                   ") but the input has ", rows, " rows");
  KILN_CHECK_VALUE(is_floating(t.dtype()), op, ": ", name, " must be floating, got ", t.dtype());
}

std::atomic<int> g_fused_add_ln_cuda{-1};  // -1 until KILN_FUSED_ADD_LN is read or the setter runs (on unless "0")

// CUDA reads the residual in its own dtype only beside an f32 x (a bf16/f16 sublayer output added
// to an f32 residual stream, as under autocast); anything else is cast to x's dtype first.
bool cuda_reads_residual_as_is(const Tensor& x, const Tensor& residual) {
  return residual.dtype() == x.dtype() ||
         (x.dtype() == DType::f32 && (residual.dtype() == DType::bf16 || residual.dtype() == DType::f16));
}

}  // namespace

bool fused_add_layer_norm_cuda() {
  int v = g_fused_add_ln_cuda.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("KILN_FUSED_ADD_LN");
    KILN_CHECK_VALUE(env == nullptr || *env == '\0' || std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0,
                     "KILN_FUSED_ADD_LN must be 0 or 1, got '", env, "'");
    v = env != nullptr && std::strcmp(env, "0") == 0 ? 0 : 1;
    g_fused_add_ln_cuda.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}
void set_fused_add_layer_norm_cuda(bool on) { g_fused_add_ln_cuda.store(on ? 1 : 0, std::memory_order_relaxed); }

LayerNormResult add_layer_norm(const Tensor& x_in, const Tensor& residual_in, const Shape& normalized_shape,
                               const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "add_layer_norm";
  check_defined(x_in, op, "x");
  check_defined(residual_in, op, "residual");
  KILN_CHECK_VALUE(x_in.shape() == residual_in.shape(), op, ": x of shape ", x_in.shape(), " and residual of shape ",
                   residual_in.shape(), " differ (no broadcasting)");
  KILN_CHECK_VALUE(is_floating(x_in.dtype()) && is_floating(residual_in.dtype()), op, ": x and residual must be floating, got ",
                   x_in.dtype(), " and ", residual_in.dtype());
  const DType dt = promote_types(x_in.dtype(), residual_in.dtype());
  const Tensor x = x_in.to(dt);
  const int64_t n = check_layer_norm(op, x, normalized_shape, weight, bias);
  if (x.device().is_cuda() && !fused_add_layer_norm_cuda()) {  // Note [Fused residual add]: the composition
    Tensor sum = ops::add(x, residual_in);
    LayerNormResult r = layer_norm(sum, normalized_shape, weight, bias, eps);
    r.sum = sum;
    return r;
  }
  const Tensor residual =
      x.device().is_cuda() && cuda_reads_residual_as_is(x, residual_in) ? residual_in : residual_in.to(dt);
  return dispatch_device(
      op, {&x, &residual, weight.defined() ? &weight : &x, bias.defined() ? &bias : &x},
      [&] { return cuda::layer_norm(x, residual, n, weight, bias, eps); },
      [&] { return KILN_CPU_KERNEL(layer_norm)(x, residual, n, weight, bias, eps); });
}

LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                           double eps) {
  check_defined(x, "layer_norm");
  const int64_t n = check_layer_norm("layer_norm", x, normalized_shape, weight, bias);
  return dispatch_device(
      "layer_norm", {&x, weight.defined() ? &weight : &x, bias.defined() ? &bias : &x},
      [&] { return cuda::layer_norm(x, Tensor(), n, weight, bias, eps); },
      [&] { return KILN_CPU_KERNEL(layer_norm)(x, Tensor(), n, weight, bias, eps); });
}

LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, const Shape& normalized_shape, bool with_bias,
                                   const Tensor& grad_residual_in) {
  const char* op = "layer_norm_backward";
  check_defined(grad_out, op, "grad_out");
  check_defined(x, op);
  const int64_t n = check_layer_norm(op, x, normalized_shape, weight, Tensor());
  KILN_CHECK_VALUE(grad_out.shape() == x.shape(), op, ": grad_out has shape ", grad_out.shape(), " but the input has shape ",
                   x.shape());
  KILN_CHECK_VALUE(grad_out.dtype() == x.dtype(), op, ": grad_out is ", grad_out.dtype(), " but the input is ", x.dtype());
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  check_stats(op, mean, "mean", rows);
  check_stats(op, rstd, "rstd", rows);
  Tensor grad_residual = grad_residual_in;
  if (grad_residual.defined()) {
    KILN_CHECK_VALUE(grad_residual.shape() == x.shape(), op, ": grad_residual has shape ", grad_residual.shape(),
                     " but the input has shape ", x.shape());
    if (x.device().is_cuda() && !fused_add_layer_norm_cuda()) {  // Note [Fused residual add]: the composition
      LayerNormGrads d = layer_norm_backward(grad_out, x, mean, rstd, weight, normalized_shape, with_bias);
      d.grad_x = ops::add(d.grad_x, grad_residual.to(x.dtype()));
      return d;
    }
    grad_residual = grad_residual.to(x.dtype());
  }
  const Tensor& gr = grad_residual;
  return dispatch_device(
      op, {&x, &grad_out, &mean, &rstd, weight.defined() ? &weight : &x, gr.defined() ? &gr : &x},
      [&] { return cuda::layer_norm_backward(grad_out, gr, x, mean, rstd, weight, normalized_shape, with_bias); },
      [&] { return KILN_CPU_KERNEL(layer_norm_backward)(grad_out, gr, x, mean, rstd, weight, normalized_shape, with_bias); });
}

}  // namespace kiln::ops
