// Differentiable conv2d: the raw im2col/GEMM kernel from kiln::ops plus a backward node that calls
// its three backward kernels (input, weight, bias), each only when that input needs a gradient.
#include <kiln/autograd/ops/conv.h>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/ops/conv.h>

namespace kiln {

namespace {

class Conv2dBackward final : public autograd::OpNode {
 public:
  explicit Conv2dBackward(const Conv2dOptions& options) : options_(options) {}
  Tensor x, weight;  // saved forward inputs: (N, C, H, W), (O, C/groups, kh, kw)

  std::string name() const override { return "Conv2dBackward"; }
  void release_saved() override { x = weight = Tensor(); }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    std::vector<Tensor> out(next_edges.size());
    if (!grads[0].defined()) return out;
    const Tensor g = grads[0].to(input_info[0].dtype);  // (N, O, OH, OW), in x's (= weight's) dtype
    if (needs_input_grad(0))
      out[0] = input_grad(0, ops::conv2d_backward_input(g, weight, input_info[0].shape, options_));
    if (needs_input_grad(1))
      out[1] = input_grad(1, ops::conv2d_backward_weight(g, x, input_info[1].shape, options_));
    if (needs_input_grad(2)) out[2] = input_grad(2, ops::conv2d_backward_bias(g));
    return out;
  }

 private:
  Conv2dOptions options_;
};

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, const Conv2dOptions& options) {
  // Under autocast all three run in the low dtype (Note [Autocast op lists]).
  const Tensor x = autograd::autocast_to_low(x_in), weight = autograd::autocast_to_low(weight_in),
               bias = autograd::autocast_to_low(bias_in);
  Tensor out = ops::conv2d(x, weight, bias, options);
  if (auto node = autograd::make_node<Conv2dBackward>({&x, &weight, &bias}, options)) {
    // Only the weight gradient reads x and only the input gradient reads the weight.
    if (node->needs_input_grad(1)) node->x = autograd::saved(x);
    if (node->needs_input_grad(0)) node->weight = autograd::saved(weight);
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace kiln
