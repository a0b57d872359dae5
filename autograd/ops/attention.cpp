// Differentiable scaled dot-product attention, two paths:
// - fused: CUDA bf16/f16 with head dim 64 or 128 runs fused flash kernels, Kiln's or cuDNN's as the
//   KILN_ATTENTION switch picks (core/cuda/kernels/fused_attention.h): no T x T matrix; the node
//   saves q, k, v, out and the row logsumexp and the backward kernels rebuild the probabilities.
// - composed: everything else (the CPU, CUDA f32/f64, other head dims) in plain math that keeps the
//   probabilities P (B, H, T, T): dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)),
//   dQ = dS K / sqrt(D), dK = dS^T Q / sqrt(D).
#include <kiln/autograd/ops/attention.h>

#include <cmath>
#include <limits>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/cuda/kernels/fused_attention.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/common.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/matmul.h>
#include <kiln/core/ops/softmax.h>
#include <kiln/core/profiler/profiler.h>

namespace kiln {

namespace {

// --- composed path ----------------------------------------------------------------------------

Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  const int64_t t = q.size(2);
  Tensor qd = autograd::saved(q), kd = autograd::saved(k), vd = autograd::saved(v);
  Tensor scores = ops::mul(ops::matmul(qd, kd.transpose(-2, -1)), scale);  // (B, H, T, T)
  if (causal) {
    // Row i sees columns j <= i.
    // Built on q's device: a host-built mask would be a blocking upload (a host sync) per call.
    Tensor pos = arange(static_cast<double>(t), TensorOptions(DType::i64).device(q.device()));
    Tensor future = ops::gt(pos.view({1, t}), pos.view({t, 1}));  // (T, T)
    scores = ops::masked_fill(scores, future, -std::numeric_limits<double>::infinity());
  }
  Tensor probs = ops::softmax(scores, -1);
  Tensor out = ops::matmul(probs, vd);  // (B, H, T, Dv)
  return autograd::record(out, "ScaledDotProductAttentionBackward", {&q, &k, &v}, [&](const autograd::Needs&) {
    return [qd, kd, vd, probs, scale](const Tensor& g, const autograd::OpNode& node) -> autograd::Grads {
      Tensor go = g.to(qd.dtype());                                                        // (B, H, Tq, Dv)
      Tensor gv = node.needs_input_grad(2) ? ops::matmul(probs.transpose(-2, -1), go) : Tensor();  // (B, H, Tk, Dv)
      Tensor gp = ops::matmul(go, vd.transpose(-2, -1));                                  // (B, H, Tq, Tk)
      Tensor gs = ops::mul(ops::softmax_backward(gp, probs, -1), scale);                  // dS / sqrt(D)
      Tensor gq = node.needs_input_grad(0) ? ops::matmul(gs, kd) : Tensor();              // (B, H, Tq, D)
      Tensor gk = node.needs_input_grad(1) ? ops::matmul(gs.transpose(-2, -1), qd) : Tensor();  // (B, H, Tk, D)
      return {gq, gk, gv};
    };
  });
}

// --- fused path (CUDA) ------------------------------------------------------------------------

Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  if constexpr (cuda::kBuilt) {
    // The kernels are called directly (no dispatch_device line), so the profiler's ranges are here.
    profiler::Range range("flash_attention", profiler::Category::op);
    profiler::DeviceRange span("flash_attention", profiler::Category::op, q.device().index);
    cuda::FusedAttentionForward f = cuda::fused_attention_forward(q, k, v, causal, scale);
    const Tensor out = f.out;
    return autograd::record(out, "ScaledDotProductFlashAttentionBackward", {&q, &k, &v}, [&](const autograd::Needs&) {
      // q, k, v, out (B, H, T, D); lse (B, H, T) f32.
      return [q = autograd::saved(q), k = autograd::saved(k), v = autograd::saved(v), out = autograd::saved(out),
              lse = f.lse, cudnn = f.cudnn, causal, scale](const Tensor& g, const autograd::OpNode& node) {
        const bool need_dkdv = node.needs_input_grad(1) || node.needs_input_grad(2);
        profiler::Range range("flash_attention_backward", profiler::Category::op);
        profiler::DeviceRange span("flash_attention_backward", profiler::Category::op, q.device().index);
        cuda::FlashAttentionGrads d = cuda::fused_attention_backward(g.to(q.dtype()), q, k, v, out, lse, causal, scale,
                                                                     node.needs_input_grad(0), need_dkdv, cudnn);
        return autograd::Grads{d.dq, d.dk, d.dv};
      };
    });
  } else {
    KILN_UNREACHABLE("flash attention in a build without CUDA");
    return Tensor();
  }
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal) {
  // Under autocast q, k, v run in the low dtype (Note [Autocast op lists]).
  const Tensor q = autograd::autocast_to_low(q_in), k = autograd::autocast_to_low(k_in),
               v = autograd::autocast_to_low(v_in);
  check_defined(q, "scaled_dot_product_attention", "q");
  check_defined(k, "scaled_dot_product_attention", "k");
  check_defined(v, "scaled_dot_product_attention", "v");
  ops::check_in_storage(q, "scaled_dot_product_attention", "q");  // the fused path reads them directly
  ops::check_in_storage(k, "scaled_dot_product_attention", "k");
  ops::check_in_storage(v, "scaled_dot_product_attention", "v");
  KILN_CHECK_VALUE(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
                   "scaled_dot_product_attention: q, k, v must be 4-D (B, H, T, D), got shapes ", q.shape(), ", ",
                   k.shape(), ", ", v.shape());
  KILN_CHECK_VALUE(q.shape() == k.shape(), "scaled_dot_product_attention: q has shape ", q.shape(), " but k has shape ",
                   k.shape());
  KILN_CHECK_VALUE(v.size(0) == k.size(0) && v.size(1) == k.size(1) && v.size(2) == k.size(2),
                   "scaled_dot_product_attention: v of shape ", v.shape(), " does not match k of shape ", k.shape(),
                   " in (B, H, T)");
  KILN_CHECK_VALUE(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(),
                   "scaled_dot_product_attention: q, k, v must share one floating dtype, got ", q.dtype(), ", ", k.dtype(),
                   ", ", v.dtype());
  ops::check_same_device("scaled_dot_product_attention", q, k);
  ops::check_same_device("scaled_dot_product_attention", q, v);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));

  if constexpr (cuda::kBuilt)
    if (q.device().is_cuda() && cuda::fused_attention_supported(q, k, v)) return flash_attention(q, k, v, causal, scale);
  return composed_attention(q, k, v, causal, scale);
}

}  // namespace kiln
