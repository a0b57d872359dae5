// add_layer_norm: one node with two outputs (the sum and the normalized sum) over the fused raw op.
#include <kiln/autograd/ops/add_layer_norm.h>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/autograd/ops/elementwise.h>
#include <kiln/autograd/ops/layer_norm.h>
#include <kiln/core/autocast.h>
#include <kiln/core/ops/layer_norm.h>

namespace kiln {

namespace {

// Inputs x, residual, weight, bias; outputs 0 = sum, 1 = out.
class AddLayerNormBackward final : public autograd::OpNode {
 public:
  AddLayerNormBackward() : OpNode(2) {}
  std::string name() const override { return "AddLayerNormBackward"; }
  void release_saved() override { sum_ = mean_ = rstd_ = weight_ = Tensor(); }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor g_sum = std::move(grads[0]), g_out = std::move(grads[1]);
    grads.clear();
    if (!g_sum.defined() && !g_out.defined()) return std::vector<Tensor>(next_edges.size());
    Tensor gx, gw, gb;
    if (g_out.defined()) {
      ops::LayerNormGrads d = ops::layer_norm_backward(g_out.to(sum_.dtype()), sum_, mean_, rstd_, weight_,
                                                       normalized_shape_, with_bias_, g_sum);
      gx = std::move(d.grad_x);
      gw = std::move(d.grad_weight);
      gb = std::move(d.grad_bias);
    } else {
      gx = g_sum;
    }
    // The sum's gradient reaches both addends (input_grad casts it to each one's dtype).
    return {input_grad(0, gx), input_grad(1, gx), input_grad(2, gw), input_grad(3, gb)};
  }

  Tensor sum_, mean_, rstd_, weight_;
  Shape normalized_shape_;
  bool with_bias_ = false;
};

}  // namespace

AddLayerNormOutput add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                                  const Tensor& weight_in, const Tensor& bias_in, double eps) {
  check_defined(x, "add_layer_norm", "x");
  check_defined(residual, "add_layer_norm", "residual");
  const DType sum_dtype = promote_types(x.dtype(), residual.dtype());
  if (autocast_enabled() && (sum_dtype == DType::bf16 || sum_dtype == DType::f16)) {
    // Under autocast layer_norm runs in f32 on a cast of the 16-bit sum: the composition does that.
    Tensor sum = x + residual;
    return {sum, layer_norm(sum, normalized_shape, weight_in, bias_in, eps)};
  }
  // f32 under autocast (Note [Autocast op lists]); the sum is already f32 or wider here.
  const Tensor weight = autograd::autocast_to_f32(weight_in), bias = autograd::autocast_to_f32(bias_in);
  ops::LayerNormResult r = ops::add_layer_norm(autograd::saved(x), autograd::saved(residual), normalized_shape,
                                               autograd::saved(weight), autograd::saved(bias), eps);
  if (!autograd::needs_grad({&x, &residual, &weight, &bias})) return {r.sum, r.out};
  auto node = std::make_shared<AddLayerNormBackward>();
  autograd::connect(*node, {&x, &residual, &weight, &bias});
  node->sum_ = autograd::saved(r.sum);  // detached: the node must not own its own output
  node->mean_ = r.mean;
  node->rstd_ = r.rstd;
  node->weight_ = autograd::saved(weight);
  node->normalized_shape_ = normalized_shape;
  node->with_bias_ = bias.defined();
  autograd::set_history(r.sum, node, 0);
  autograd::set_history(r.out, node, 1);
  return {r.sum, r.out};
}

}  // namespace kiln
