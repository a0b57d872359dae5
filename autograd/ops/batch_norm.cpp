// Differentiable batch norm over (N, C, *) per channel, with torch semantics: training normalizes
// with the batch statistics and updates the running buffers in place; eval uses the running ones.
// Forward and backward are the raw kernels kiln::ops::batch_norm / batch_norm_backward (CPU and
// CUDA; formulas in Note [Batch norm gradient], core/ops/batch_norm.h).
#include <kiln/autograd/ops/conv.h>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/ops/batch_norm.h>

namespace kiln {

using autograd::saved;

namespace {

class BatchNormBackward final : public autograd::OpNode {
 public:
  explicit BatchNormBackward(bool training) : training_(training) {}
  Tensor x;             // the forward input (N, C, ...)
  Tensor weight;        // (C), or undefined without affine weight
  Tensor mean, invstd;  // (C): the statistics the forward normalized with

  std::string name() const override { return "BatchNormBackward"; }
  void release_saved() override { x = weight = mean = invstd = Tensor(); }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    std::vector<Tensor> out(next_edges.size());
    if (!grads[0].defined()) return out;
    const ops::BatchNormGrads g = ops::batch_norm_backward(
        grads[0], x, weight, mean, invstd, training_, {needs_input_grad(0), needs_input_grad(1), needs_input_grad(2)});
    if (needs_input_grad(0)) out[0] = input_grad(0, g.input);
    if (needs_input_grad(1)) out[1] = input_grad(1, g.weight);  // (C), the parameters' own shape
    if (needs_input_grad(2)) out[2] = input_grad(2, g.bias);
    return out;
  }

 private:
  bool training_;
};

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight_in,
                  const Tensor& bias_in, bool training, double momentum, double eps) {
  check_defined(x_in, "batch_norm");
  // f32 under autocast (Note [Autocast op lists]): the statistics of a bf16/f16 activation are
  // taken in f32 and the output is f32, whatever the dtype the conv before it produced.
  const Tensor x = autograd::autocast_to_f32(x_in), weight = autograd::autocast_to_f32(weight_in),
               bias = autograd::autocast_to_f32(bias_in);
  // The raw op checks the arguments and updates the running buffers in place (never recorded).
  // Parameters are read through detached handles; the node below links their gradients.
  ops::BatchNormResult r;
  {
    NoGradGuard no_grad;
    r = ops::batch_norm(x, saved(weight), saved(bias), running_mean, running_var, training, momentum, eps);
  }
  if (auto node = autograd::make_node<BatchNormBackward>({&x, &weight, &bias}, training)) {
    node->x = saved(x);
    node->weight = saved(weight);
    node->mean = r.mean;
    node->invstd = r.invstd;
    autograd::set_history(r.out, node);
  }
  return r.out;
}

}  // namespace kiln
