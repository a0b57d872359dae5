// Differentiable softmax and log_softmax: the raw kernels from kiln::ops, with backward nodes that
// keep only the output (both gradients are functions of it, not of the input).
#include <kiln/autograd/ops/softmax.h>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/ops/softmax.h>

namespace kiln {

namespace {

Tensor softmax_impl(const Tensor& x_in, int64_t dim, bool log) {
  const Tensor x = autograd::autocast_to_f32(x_in);  // f32 under autocast (Note [Autocast op lists])
  Tensor out = log ? ops::log_softmax(x, dim) : ops::softmax(x, dim);
  // softmax: grad_in = out * (g - sum(g * out)); log_softmax: grad_in = g - exp(out) * sum(g).
  return autograd::record(out, log ? "LogSoftmaxBackward" : "SoftmaxBackward", {&x}, [&](const autograd::Needs&) {
    return [out = autograd::saved(out), log, dim](const Tensor& g) {
      Tensor go = g.to(out.dtype());
      return log ? ops::log_softmax_backward(go, out, dim) : ops::softmax_backward(go, out, dim);
    };
  });
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }

}  // namespace kiln
