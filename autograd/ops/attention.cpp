// Differentiable scaled dot-product attention in plain math (no fused kernel): the forward keeps
// the attention probabilities P (B, H, T, T), from which the backward gets every gradient:
// dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)), dQ = dS K / sqrt(D), dK = dS^T Q / sqrt(D).
#include <kiln/autograd/ops/functional.h>

#include <cmath>
#include <limits>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/matmul.h>
#include <kiln/core/ops/softmax.h>

namespace kiln {

namespace {

class AttentionBackward final : public autograd::OpNode {
 public:
  explicit AttentionBackward(double scale) : scale_(scale) {}
  Tensor q, k, v, probs;  // probs (B, H, Tq, Tk)
  std::string name() const override { return "ScaledDotProductAttentionBackward"; }
  void release_saved() override { q = k = v = probs = Tensor(); }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    if (!g[0].defined()) return std::vector<Tensor>(next_edges.size());
    Tensor go = g[0].to(q.dtype());                                                 // (B, H, Tq, Dv)
    Tensor gv = needs_input_grad(2) ? ops::matmul(probs.transpose(-2, -1), go) : Tensor();  // (B, H, Tk, Dv)
    Tensor gp = ops::matmul(go, v.transpose(-2, -1));                               // (B, H, Tq, Tk)
    Tensor gs = ops::mul(ops::softmax_backward(gp, probs, -1), scale_);             // dS / sqrt(D)
    Tensor gq = needs_input_grad(0) ? ops::matmul(gs, k) : Tensor();                // (B, H, Tq, D)
    Tensor gk = needs_input_grad(1) ? ops::matmul(gs.transpose(-2, -1), q) : Tensor();  // (B, H, Tk, D)
    return {input_grad(0, gq), input_grad(1, gk), input_grad(2, gv)};
  }

 private:
  double scale_;
};

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal) {
  // Under autocast q, k, v run in the low dtype (Note [Autocast op lists]).
  const Tensor q = autograd::autocast_to_low(q_in), k = autograd::autocast_to_low(k_in),
               v = autograd::autocast_to_low(v_in);
  check_defined(q, "scaled_dot_product_attention", "q");
  check_defined(k, "scaled_dot_product_attention", "k");
  check_defined(v, "scaled_dot_product_attention", "v");
  KILN_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
             "scaled_dot_product_attention: q, k, v must be 4-D (B, H, T, D), got shapes ", q.shape(), ", ",
             k.shape(), ", ", v.shape());
  KILN_CHECK(q.shape() == k.shape(), "scaled_dot_product_attention: q has shape ", q.shape(), " but k has shape ",
             k.shape());
  KILN_CHECK(v.size(0) == k.size(0) && v.size(1) == k.size(1) && v.size(2) == k.size(2),
             "scaled_dot_product_attention: v of shape ", v.shape(), " does not match k of shape ", k.shape(),
             " in (B, H, T)");
  KILN_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(),
             "scaled_dot_product_attention: q, k, v must share one floating dtype, got ", q.dtype(), ", ", k.dtype(),
             ", ", v.dtype());
  const int64_t t = q.size(2), d = q.size(3);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));

  Tensor qd = autograd::saved(q), kd = autograd::saved(k), vd = autograd::saved(v);
  Tensor scores = ops::mul(ops::matmul(qd, kd.transpose(-2, -1)), scale);  // (B, H, T, T)
  if (causal) {
    // Row i sees columns j <= i.
    Tensor pos = arange(static_cast<double>(t));
    Tensor future = ops::gt(pos.view({1, t}), pos.view({t, 1})).to(q.device());  // (T, T)
    scores = ops::masked_fill(scores, future, -std::numeric_limits<double>::infinity());
  }
  Tensor probs = ops::softmax(scores, -1);
  Tensor out = ops::matmul(probs, vd);  // (B, H, T, Dv)
  if (auto node = autograd::make_node<AttentionBackward>({&q, &k, &v}, scale)) {
    node->q = qd;
    node->k = kd;
    node->v = vd;
    node->probs = probs;
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace kiln
