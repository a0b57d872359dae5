// Differentiable batch norm over (N, C, *) per channel, with torch semantics: training normalizes
// with the batch statistics and updates the running buffers in place; eval uses the running ones.
// Forward and backward are written with raw kiln::ops reductions and elementwise kernels.
#include <kiln/autograd/ops/conv.h>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/reduce.h>

namespace kiln {

using autograd::saved;

namespace {

// Where the channel dim sits: per-channel tensors broadcast as (1, C, 1, ...), statistics reduce
// over every other dim, and each channel holds `count` elements.
struct ChannelLayout {
  int64_t channels = 0;
  int64_t count = 0;
  Shape broadcast;
  std::vector<int64_t> reduce_dims;
};

ChannelLayout channel_layout(const Tensor& x) {
  ChannelLayout l;
  l.channels = x.size(1);
  l.count = l.channels == 0 ? 0 : x.numel() / l.channels;
  l.broadcast = Shape(static_cast<size_t>(x.dim()), 1);
  l.broadcast[1] = l.channels;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != 1) l.reduce_dims.push_back(d);
  return l;
}

void check_per_channel(const Tensor& t, const char* what, const Tensor& x) {
  if (!t.defined()) return;
  KILN_CHECK(t.dim() == 1 && t.size(0) == x.size(1), "batch_norm: ", what, " must have shape [", x.size(1),
             "] (one value per channel of the input ", x.shape(), "), got shape ", t.shape());
  KILN_CHECK(t.device() == x.device(), "batch_norm: ", what, " is on ", t.device(), " but the input is on ",
             x.device());
}

// Note [Batch norm gradient]
// With x_hat = (x - mean) * rstd and dy_hat = dy * weight, per channel over its M elements:
//   training: dx = rstd / M * (M * dy_hat - sum(dy_hat) - x_hat * sum(dy_hat * x_hat))
//             (mean and rstd depend on x through the batch statistics);
//   eval:     dx = dy_hat * rstd (the running statistics are constants).
// In both, dweight = sum(dy * x_hat) and dbias = sum(dy).
class BatchNormBackward final : public autograd::OpNode {
 public:
  BatchNormBackward(bool training, ChannelLayout layout) : training_(training), layout_(std::move(layout)) {}
  Tensor x_hat;   // x's shape
  Tensor rstd;    // (1, C, 1, ...)
  Tensor weight;  // (C), or undefined without affine weight

  std::string name() const override { return "BatchNormBackward"; }
  void release_saved() override { x_hat = rstd = weight = Tensor(); }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    std::vector<Tensor> out(next_edges.size());
    const Tensor& g = grads[0];
    if (!g.defined()) return out;
    const std::vector<int64_t>& dims = layout_.reduce_dims;
    if (needs_input_grad(0)) {
      Tensor dy_hat = weight.defined() ? ops::mul(g, weight.view(layout_.broadcast)) : g;
      Tensor dx;
      if (training_) {
        const double m = static_cast<double>(layout_.count);
        Tensor sum_dy = ops::sum(dy_hat, dims, /*keepdim=*/true);
        Tensor sum_dy_xhat = ops::sum(ops::mul(dy_hat, x_hat), dims, /*keepdim=*/true);
        Tensor inner = ops::sub(ops::sub(ops::mul(dy_hat, m), sum_dy), ops::mul(x_hat, sum_dy_xhat));
        dx = ops::mul(inner, ops::div(rstd, m));
      } else {
        dx = ops::mul(dy_hat, rstd);
      }
      out[0] = input_grad(0, dx);
    }
    // Summed without keepdim: (C), the parameters' own shape.
    if (needs_input_grad(1)) out[1] = input_grad(1, ops::sum(ops::mul(g, x_hat), dims));
    if (needs_input_grad(2)) out[2] = input_grad(2, ops::sum(g, dims));
    return out;
  }

 private:
  bool training_;
  ChannelLayout layout_;
};

// running = (1 - momentum) * running + momentum * stat, in place (stat is (1, C, 1, ...)).
void update_running(const Tensor& running, const Tensor& stat, double momentum) {
  if (!running.defined()) return;
  Tensor r = running;  // a handle aliasing the caller's buffer
  ops::mul_(r, 1.0 - momentum);
  ops::add_(r, stat.reshape({running.numel()}), momentum);
}

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight_in,
                  const Tensor& bias_in, bool training, double momentum, double eps) {
  check_defined(x_in, "batch_norm");
  // f32 under autocast (Note [Autocast op lists]): the statistics of a bf16/f16 activation are
  // taken in f32 and the output is f32, whatever the dtype the conv before it produced.
  const Tensor x = autograd::autocast_to_f32(x_in), weight = autograd::autocast_to_f32(weight_in),
               bias = autograd::autocast_to_f32(bias_in);
  KILN_CHECK(x.dim() >= 2, "batch_norm: expected an input (N, C, ...) with at least 2 dims, got shape ", x.shape());
  KILN_CHECK(is_floating(x.dtype()), "batch_norm: expected a floating-point input, got ", x.dtype());
  KILN_CHECK(eps >= 0, "batch_norm: eps must be non-negative, got ", eps);
  check_per_channel(weight, "weight", x);
  check_per_channel(bias, "bias", x);
  check_per_channel(running_mean, "running_mean", x);
  check_per_channel(running_var, "running_var", x);
  KILN_CHECK(running_mean.defined() == running_var.defined(),
             "batch_norm: running_mean and running_var must be both given or both undefined");
  const ChannelLayout layout = channel_layout(x);
  if (training) {
    KILN_CHECK(layout.count > 1, "batch_norm: expected more than 1 value per channel when training, got input shape ",
               x.shape());
  } else {
    KILN_CHECK(running_mean.defined(), "batch_norm: eval mode (training = false) needs running_mean and running_var");
  }

  // Per-channel statistics as (1, C, 1, ...): the batch's (biased variance) or the running ones.
  // Parameters and buffers are read through detached handles so their views record nothing.
  Tensor mean, var;
  if (training) {
    mean = ops::mean(x, layout.reduce_dims, /*keepdim=*/true);
    var = ops::var(x, layout.reduce_dims, /*correction=*/0, /*keepdim=*/true);
  } else {
    mean = saved(running_mean).view(layout.broadcast);
    var = saved(running_var).view(layout.broadcast);
  }
  Tensor rstd = ops::rsqrt(ops::add(var, eps));
  Tensor x_hat = ops::mul(ops::sub(x, mean), rstd);
  Tensor out = x_hat;
  if (weight.defined()) out = ops::mul(out, saved(weight).view(layout.broadcast));
  if (bias.defined()) out = ops::add(out, saved(bias).view(layout.broadcast));

  if (training && running_mean.defined()) {
    NoGradGuard no_grad;
    const double m = static_cast<double>(layout.count);
    update_running(running_mean, mean, momentum);
    update_running(running_var, ops::mul(var, m / (m - 1.0)), momentum);  // unbiased, as torch
  }

  if (auto node = autograd::make_node<BatchNormBackward>({&x, &weight, &bias}, training, layout)) {
    node->x_hat = saved(x_hat);  // detached: without affine, x_hat is `out` itself
    node->rstd = saved(rstd);
    node->weight = saved(weight);
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace kiln
