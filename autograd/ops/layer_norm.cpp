// Differentiable layer norm: the raw kernel computes out together with the per-row mean and rstd,
// which the node saves so the backward kernel never recomputes the statistics.
#include <kiln/autograd/ops/functional.h>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/ops/layer_norm.h>

namespace kiln {

namespace {

class LayerNormBackward final : public autograd::OpNode {
 public:
  LayerNormBackward(Shape normalized_shape, bool with_bias)
      : normalized_shape_(std::move(normalized_shape)), with_bias_(with_bias) {}
  Tensor x, mean, rstd, weight;  // weight may be undefined
  std::string name() const override { return "LayerNormBackward"; }
  void release_saved() override { x = mean = rstd = weight = Tensor(); }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    if (!g[0].defined()) return std::vector<Tensor>(next_edges.size());
    ops::LayerNormGrads r =
        ops::layer_norm_backward(g[0].to(x.dtype()), x, mean, rstd, weight, normalized_shape_, with_bias_);
    return {input_grad(0, r.grad_x), input_grad(1, r.grad_weight), input_grad(2, r.grad_bias)};
  }

 private:
  Shape normalized_shape_;
  bool with_bias_;
};

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in, const Tensor& bias_in,
                  double eps) {
  // f32 under autocast (Note [Autocast op lists]).
  const Tensor x = autograd::autocast_to_f32(x_in), weight = autograd::autocast_to_f32(weight_in),
               bias = autograd::autocast_to_f32(bias_in);
  ops::LayerNormResult r = ops::layer_norm(x, normalized_shape, weight, bias, eps);
  if (auto node = autograd::make_node<LayerNormBackward>({&x, &weight, &bias}, normalized_shape, bias.defined())) {
    node->x = autograd::saved(x);
    node->mean = r.mean;
    node->rstd = r.rstd;
    node->weight = autograd::saved(weight);
    autograd::set_history(r.out, node);
  }
  return r.out;
}

}  // namespace kiln
