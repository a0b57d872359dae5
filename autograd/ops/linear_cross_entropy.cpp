// The chunked LM head + cross entropy (Note [Chunked LM head]): raw GEMMs and the fused cross
// entropy kernels of core/ops, one chunk of tokens at a time, recorded as one node.
#include <kiln/autograd/ops/linear_cross_entropy.h>

#include <algorithm>

#include <kiln/autograd/autocast.h>
#include <kiln/autograd/function.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/cross_entropy.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/matmul.h>
#include <kiln/core/ops/reduce.h>

namespace kiln {

namespace {

constexpr int64_t kChunkLogitBytes = int64_t(256) << 20;

int64_t default_chunk_rows(int64_t classes) {
  const int64_t rows = kChunkLogitBytes / (4 * std::max<int64_t>(classes, 1));
  return std::max<int64_t>(128, rows / 128 * 128);  // whole tiles of 128 rows for the GEMMs
}

}  // namespace

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets,
                            const LinearCrossEntropyOptions& options) {
  check_defined(x, "linear_cross_entropy", "x");
  check_defined(weight, "linear_cross_entropy", "weight");
  check_defined(targets, "linear_cross_entropy", "targets");
  KILN_CHECK_VALUE(is_floating(x.dtype()) && is_floating(weight.dtype()),
                   "linear_cross_entropy: x and weight must be floating, got ", x.dtype(), " and ", weight.dtype());
  KILN_CHECK_VALUE(weight.dim() == 2, "linear_cross_entropy: weight must be (V, C), got shape ", weight.shape());
  KILN_CHECK_VALUE(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear_cross_entropy: x of shape ", x.shape(),
                   " does not match weight of shape ", weight.shape(), " (x's last dim must be ", weight.size(1), ")");
  KILN_CHECK(x.device() == weight.device(), "linear_cross_entropy: x on ", x.device(), " but weight on ",
             weight.device());
  KILN_CHECK_VALUE(targets.dtype() == DType::i64 || targets.dtype() == DType::i32,
                   "linear_cross_entropy: targets must be i64 or i32 class indices, got ", targets.dtype());
  KILN_CHECK_VALUE(options.reduction_ != Reduction::none,
                   "linear_cross_entropy: reduction none is not supported (use linear + cross_entropy)");
  const int64_t c = x.size(-1), v = weight.size(0);
  const int64_t classes = options.classes_ < 0 ? v : options.classes_;
  KILN_CHECK_VALUE(classes >= 1 && classes <= v, "linear_cross_entropy: classes (", classes,
                   ") must be in [1, weight rows = ", v, "]");
  const Shape lead(x.shape().begin(), x.shape().end() - 1);
  const int64_t n = shape_numel(lead);
  KILN_CHECK_VALUE(targets.shape() == lead || (targets.dim() == 1 && targets.numel() == n),
                   "linear_cross_entropy: targets of shape ", targets.shape(), " do not match x of shape ", x.shape(),
                   " (expected ", lead, " or [", n, "])");
  KILN_CHECK_VALUE(options.chunk_rows_ >= 0, "linear_cross_entropy: chunk_rows must be >= 0, got ", options.chunk_rows_);
  const int64_t chunk = options.chunk_rows_ > 0 ? options.chunk_rows_ : default_chunk_rows(classes);

  const bool grad = autograd::needs_grad({&x, &weight});
  const bool need_dx = grad && x.requires_grad(), need_dw = grad && weight.requires_grad();
  // The GEMMs see what linear would under autocast (the low dtype); the node's edges go to x and
  // weight themselves, so dW reaches an f32 weight without a round trip through bf16.
  Tensor xr, wc;
  {
    NoGradGuard no_grad;
    xr = autograd::autocast_to_low(autograd::saved(x)).reshape({n, c});  // (N, C)
    wc = autograd::autocast_to_low(autograd::saved(weight)).narrow(0, 0, classes);  // (classes, C)
  }
  const Tensor tr = targets.to(x.device()).reshape({n});
  const bool low = xr.dtype() == DType::bf16 || xr.dtype() == DType::f16;
  const DType loss_dtype = low ? DType::f32 : xr.dtype();
  const DType dw_dtype = weight.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const TensorOptions on_device = TensorOptions(loss_dtype).device(x.device());

  Tensor dx = need_dx ? empty({n, c}, TensorOptions(xr.dtype()).device(x.device())) : Tensor();  // (N, C)
  Tensor dw = need_dw ? zeros({v, c}, TensorOptions(dw_dtype).device(x.device())) : Tensor();    // (V, C)
  Tensor dw_rows = need_dw ? dw.narrow(0, 0, classes) : Tensor();
  const Tensor one = grad ? ones({}, on_device) : Tensor();
  Tensor loss_sum = zeros({}, on_device);
  Tensor count = zeros({}, TensorOptions(DType::i64).device(x.device()));
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rows = std::min(chunk, n - r0);
    const Tensor xc = xr.narrow(0, r0, rows);                   // (rows, C)
    const Tensor tc = tr.narrow(0, r0, rows);                   // (rows)
    Tensor logits = ops::matmul(xc, wc.t());                    // (rows, classes)
    ops::CrossEntropyResult r = ops::cross_entropy_forward(logits, tc, options.ignore_index_, 0.0);
    ops::add_(loss_sum, ops::sum(r.loss));
    ops::add_(count, r.count);
    if (!grad) continue;
    // The chunk's logits' gradient for a sum-reduced loss with incoming gradient 1.
    Tensor dlogits = ops::cross_entropy_backward(one, logits, tc, r.lse, options.ignore_index_, 0.0, 1.0);
    logits = Tensor();
    if (need_dx) dx.narrow(0, r0, rows).copy_(ops::matmul(dlogits, wc));  // (rows, C)
    if (need_dw) ops::add_(dw_rows, ops::matmul(dlogits.t(), xc));        // (classes, C)
  }
  const bool mean = options.reduction_ == Reduction::mean;
  Tensor out = mean ? ops::div(loss_sum, count.to(loss_dtype)) : loss_sum;  // count 0 gives nan, as torch

  return autograd::record(out, "LinearCrossEntropyBackward", {&x, &weight}, [&](const autograd::Needs&) {
    return [dx, dw, count, mean](const Tensor& g, const autograd::OpNode& node) -> autograd::Grads {
      // 0-dim on the device, f32 at least: a 1 / count rounded to bf16 would bias every gradient.
      const DType wide = g.dtype() == DType::f64 ? DType::f64 : DType::f32;
      const Tensor scale = mean ? ops::div(g.to(wide), count.to(wide)) : g.to(wide);
      autograd::Grads grads(2);
      if (dx.defined() && node.needs_input_grad(0))
        grads[0] = ops::mul(dx.to(wide), scale).reshape(node.input_info[0].shape);
      if (dw.defined() && node.needs_input_grad(1)) grads[1] = ops::mul(dw.to(wide), scale);
      return grads;
    };
  });
}

}  // namespace kiln
