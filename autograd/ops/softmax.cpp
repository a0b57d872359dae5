// Differentiable softmax and log_softmax: the raw kernels from kiln::ops, with backward nodes that
// keep only the output (both gradients are functions of it, not of the input).
#include <kiln/autograd/ops/functional.h>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/ops/softmax.h>

namespace kiln {

namespace {

// softmax: grad_in = out * (g - sum(g * out)); log_softmax: grad_in = g - exp(out) * sum(g).
class SoftmaxBackward final : public autograd::OpNode {
 public:
  SoftmaxBackward(bool log, int64_t dim) : log_(log), dim_(dim) {}
  Tensor out;
  std::string name() const override { return log_ ? "LogSoftmaxBackward" : "SoftmaxBackward"; }
  void release_saved() override { out = Tensor(); }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    if (!g[0].defined()) return {Tensor()};
    Tensor go = g[0].to(out.dtype());
    Tensor gi = log_ ? ops::log_softmax_backward(go, out, dim_) : ops::softmax_backward(go, out, dim_);
    return {input_grad(0, gi)};
  }

 private:
  bool log_;
  int64_t dim_;
};

Tensor softmax_impl(const Tensor& x_in, int64_t dim, bool log) {
  const Tensor x = autograd::autocast_to_f32(x_in);  // f32 under autocast (Note [Autocast op lists])
  Tensor out = log ? ops::log_softmax(x, dim) : ops::softmax(x, dim);
  if (auto node = autograd::make_node<SoftmaxBackward>({&x}, log, dim)) {
    node->out = autograd::saved(out);
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }

}  // namespace kiln
