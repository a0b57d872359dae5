// Differentiable batch norm over (N, C, *) per channel, with torch semantics: training normalizes
// with the batch statistics and updates the running buffers in place; eval uses the running ones.
// Forward and backward are the raw kernels kiln::ops::batch_norm / batch_norm_backward (CPU and
// CUDA; formulas in Note [Batch norm gradient], core/ops/batch_norm.h).
#include <kiln/autograd/ops/batch_norm.h>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/ops/batch_norm.h>

namespace kiln {

using autograd::saved;

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
  return autograd::record(r.out, "BatchNormBackward", {&x, &weight, &bias}, [&](const autograd::Needs&) {
    // weight may be undefined; mean and invstd (C) are the statistics the forward normalized with.
    return [x = saved(x), weight = saved(weight), mean = r.mean, invstd = r.invstd, training](
               const Tensor& g, const autograd::OpNode& node) {
      const ops::BatchNormGrads d =
          ops::batch_norm_backward(g, x, weight, mean, invstd, training,
                                   {node.needs_input_grad(0), node.needs_input_grad(1), node.needs_input_grad(2)});
      return autograd::Grads{d.input, d.weight, d.bias};  // weight and bias (C), the parameters' own shape
    };
  });
}

}  // namespace kiln
