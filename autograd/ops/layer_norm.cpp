// Differentiable layer norm: the raw kernel computes out together with the per-row mean and rstd,
// which the node saves so the backward kernel never recomputes the statistics.
#include <kiln/autograd/ops/layer_norm.h>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/ops/layer_norm.h>

namespace kiln {

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in, const Tensor& bias_in,
                  double eps) {
  // f32 under autocast (Note [Autocast op lists]).
  const Tensor x = autograd::autocast_to_f32(x_in), weight = autograd::autocast_to_f32(weight_in),
               bias = autograd::autocast_to_f32(bias_in);
  ops::LayerNormResult r = ops::layer_norm(x, normalized_shape, weight, bias, eps);
  return autograd::record(r.out, "LayerNormBackward", {&x, &weight, &bias}, [&](const autograd::Needs&) {
    return [x = autograd::saved(x), mean = r.mean, rstd = r.rstd, weight = autograd::saved(weight), normalized_shape,
            with_bias = bias.defined()](const Tensor& g) {
      ops::LayerNormGrads d = ops::layer_norm_backward(g.to(x.dtype()), x, mean, rstd, weight, normalized_shape, with_bias);
      return autograd::Grads{d.grad_x, d.grad_weight, d.grad_bias};
    };
  });
}

}  // namespace kiln
