// Differentiable conv2d: the raw im2col/GEMM kernel from kiln::ops plus a backward node that calls
// its three backward kernels (input, weight, bias), each only when that input needs a gradient.
#include <kiln/autograd/ops/conv.h>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/ops/conv.h>

namespace kiln {

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, const Conv2dOptions& options) {
  // Under autocast all three run in the low dtype (Note [Autocast op lists]).
  const Tensor x = autograd::autocast_to_low(x_in), weight = autograd::autocast_to_low(weight_in),
               bias = autograd::autocast_to_low(bias_in);
  Tensor out = ops::conv2d(x, weight, bias, options);
  return autograd::record(out, "Conv2dBackward", {&x, &weight, &bias}, [&](const autograd::Needs& needs) {
    // Only the weight gradient reads x and only the input gradient reads the weight.
    // x (N, C, H, W), weight (O, C/groups, kh, kw).
    return [x = needs[1] ? autograd::saved(x) : Tensor(), weight = needs[0] ? autograd::saved(weight) : Tensor(),
            options](const Tensor& g_out, const autograd::OpNode& node) -> autograd::Grads {
      const Tensor g = g_out.to(node.input_info[0].dtype);  // (N, O, OH, OW), in x's (= weight's) dtype
      autograd::Grads out(3);
      if (node.needs_input_grad(0)) out[0] = ops::conv2d_backward_input(g, weight, node.input_info[0].shape, options);
      if (node.needs_input_grad(1)) out[1] = ops::conv2d_backward_weight(g, x, node.input_info[1].shape, options);
      if (node.needs_input_grad(2)) out[2] = ops::conv2d_backward_bias(g);
      return out;
    };
  });
}

}  // namespace kiln
