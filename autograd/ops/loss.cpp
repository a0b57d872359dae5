// Differentiable losses: cross_entropy as one fused log-softmax + NLL (with torch's ignore_index,
// label_smoothing and reduction semantics) and mse_loss. The cross-entropy backward builds its
// gradient in a single (N, C) buffer: softmax - (1-ls) onehot - ls/C, scaled per row in place.
#include <kiln/autograd/ops/functional.h>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/index.h>
#include <kiln/core/ops/reduce.h>
#include <kiln/core/ops/softmax.h>

namespace kiln {

namespace {

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::none: return "none";
    case Reduction::mean: return "mean";
    case Reduction::sum: return "sum";
  }
  return "?";
}

// Per-row loss (N, 1) -> the requested reduction; `lead` is the shape of Reduction::none.
Tensor reduce_rows(const Tensor& rows, Reduction reduction, const Shape& lead, double count) {
  switch (reduction) {
    case Reduction::none: return rows.reshape(lead);
    case Reduction::sum: return ops::sum(rows);
    case Reduction::mean: return ops::div(ops::sum(rows), count);  // count 0 gives nan, as torch
  }
  KILN_ASSERT(false, "unknown reduction ", static_cast<int>(reduction));
  return Tensor();
}

class CrossEntropyBackward final : public autograd::OpNode {
 public:
  Tensor logp;    // (N, C) log_softmax of the logits, in the compute dtype
  Tensor target;  // (N, 1) i64, ignored rows mapped to class 0
  Tensor weight;  // (N, 1) 1 for counted rows, 0 for ignored ones
  double count = 0;
  double label_smoothing = 0;
  Reduction reduction = Reduction::mean;
  std::string name() const override { return "CrossEntropyBackward"; }
  void release_saved() override { logp = target = weight = Tensor(); }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    if (!g[0].defined()) return {Tensor()};
    const int64_t n = logp.size(0), c = logp.size(1);
    const TensorOptions opts = TensorOptions(logp.dtype()).device(logp.device());
    Tensor go = g[0].to(logp.dtype());
    Tensor grad = ops::exp(logp);  // (N, C): the only full-size temporary
    ops::scatter_add_(grad, 1, target, full({n, 1}, -(1.0 - label_smoothing), opts));
    if (label_smoothing > 0) ops::add_(grad, scalar_tensor(-label_smoothing / double(c), opts));
    Tensor coef;  // (N, 1)
    switch (reduction) {
      case Reduction::none: coef = ops::mul(go.reshape({n, 1}), weight); break;
      case Reduction::sum: coef = ops::mul(weight, go); break;
      case Reduction::mean: coef = ops::mul(weight, ops::div(go, count)); break;
    }
    ops::mul_(grad, coef);
    return {input_grad(0, grad.reshape(input_info[0].shape))};
  }
};

class MseLossBackward final : public autograd::OpNode {
 public:
  Tensor diff;  // input - target
  Reduction reduction = Reduction::mean;
  std::string name() const override { return "MseLossBackward"; }
  void release_saved() override { diff = Tensor(); }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    if (!g[0].defined()) return std::vector<Tensor>(next_edges.size());
    double scale = 2.0;
    if (reduction == Reduction::mean) scale /= double(diff.numel());
    Tensor gi = ops::mul(diff, ops::mul(g[0], scale));
    return {input_grad(0, gi), input_grad(1, ops::neg(gi))};
  }
};

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets, const CrossEntropyOptions& options) {
  const Tensor logits = autograd::autocast_to_f32(logits_in);  // f32 under autocast (Note [Autocast op lists])
  check_defined(logits, "cross_entropy", "logits");
  check_defined(targets, "cross_entropy", "targets");
  KILN_CHECK(is_floating(logits.dtype()), "cross_entropy: logits must be floating, got ", logits.dtype());
  KILN_CHECK(targets.dtype() == DType::i64 || targets.dtype() == DType::i32,
             "cross_entropy: targets must be i64 or i32 class indices, got ", targets.dtype());
  KILN_CHECK(logits.dim() >= 1 && logits.size(-1) >= 1,
             "cross_entropy: logits must be (..., C) with C >= 1, got shape ", logits.shape());
  const double ls = options.label_smoothing_;
  KILN_CHECK(ls >= 0.0 && ls <= 1.0, "cross_entropy: label_smoothing must be in [0, 1], got ", ls);
  const int64_t c = logits.size(-1);
  const Shape lead(logits.shape().begin(), logits.shape().end() - 1);
  const int64_t n = shape_numel(lead);
  KILN_CHECK(targets.shape() == lead || (targets.dim() == 1 && targets.numel() == n),
             "cross_entropy: targets of shape ", targets.shape(), " do not match logits of shape ", logits.shape(),
             " (expected ", lead, " or [", n, "])");

  // Validate targets on the host; ignored rows gather class 0 and are weighted 0.
  const DType ct = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor t_host = targets.to(Device::cpu()).to(DType::i64).contiguous();
  const int64_t* t = t_host.data<int64_t>();
  Tensor safe = empty({n, 1}, DType::i64);
  Tensor weight = empty({n, 1}, DType::f64);
  int64_t* s = safe.data<int64_t>();
  double* w = weight.data<double>();
  double count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool ignored = t[i] == options.ignore_index_;
    KILN_CHECK(ignored || (t[i] >= 0 && t[i] < c), "cross_entropy: target ", t[i], " at row ", i,
               " is out of range for ", c, " classes (ignore_index ", options.ignore_index_, ")");
    s[i] = ignored ? 0 : t[i];
    w[i] = ignored ? 0.0 : 1.0;
    count += w[i];
  }
  const Device dev = logits.device();
  safe = safe.to(dev);
  weight = weight.to(dev, ct);

  // loss_i = -(1-ls) logp[i, t_i] - ls/C sum_c logp[i, c], zero on ignored rows.
  Tensor logp = ops::log_softmax(autograd::saved(logits).to(ct).reshape({n, c}), 1);
  Tensor rows = ops::mul(ops::gather(logp, 1, safe), -(1.0 - ls));
  if (ls > 0) rows = ops::sub(rows, ops::mul(ops::sum(logp, {1}, /*keepdim=*/true), ls / double(c)));
  rows = ops::masked_fill(rows, ops::eq(weight, 0.0), 0.0);
  Tensor out = reduce_rows(rows, options.reduction_, lead, count).to(logits.dtype());

  if (auto node = autograd::make_node<CrossEntropyBackward>({&logits})) {
    node->logp = logp;
    node->target = safe;
    node->weight = weight;
    node->count = count;
    node->label_smoothing = ls;
    node->reduction = options.reduction_;
    autograd::set_history(out, node);
  }
  return out;
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  // f32 under autocast (Note [Autocast op lists]).
  const Tensor input = autograd::autocast_to_f32(input_in), target = autograd::autocast_to_f32(target_in);
  check_defined(input, "mse_loss", "input");
  check_defined(target, "mse_loss", "target");
  KILN_CHECK(input.shape() == target.shape(), "mse_loss: input has shape ", input.shape(), " but target has shape ",
             target.shape(), " (reduction ", reduction_name(reduction), ")");
  KILN_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), "mse_loss: expected floating tensors, got ",
             input.dtype(), " and ", target.dtype());
  Tensor diff = ops::sub(autograd::saved(input), autograd::saved(target));
  Tensor sq = ops::square(diff);
  Tensor out = reduction == Reduction::none ? sq : reduction == Reduction::sum ? ops::sum(sq) : ops::mean(sq);
  if (auto node = autograd::make_node<MseLossBackward>({&input, &target})) {
    node->diff = diff;
    node->reduction = reduction;
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace kiln
