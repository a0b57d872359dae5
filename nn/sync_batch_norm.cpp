// The math of SyncBatchNorm: batch statistics of the batches of several processes together, from
// one differentiable cross-process sum (CrossProcessSum; the collective lives in parallel/).
#include <kiln/autograd/grad_mode.h>
#include <kiln/autograd/ops/elementwise.h>
#include <kiln/autograd/ops/join.h>
#include <kiln/autograd/ops/reduce.h>
#include <kiln/core/factory.h>
#include <kiln/nn/normalization.h>

namespace kiln::nn {

// Note [SyncBatchNorm]
// Each process p holds a batch of n_p values per channel. It computes its own count, mean and
// centered sum of squares m2_p = sum (x - mean_p)^2 (stable: no E[x^2] - E[x]^2 cancellation),
// writes them into row p of a (P, 1 + 2C) table of zeros and sums the table over the processes:
// one collective that all-gathers every process's row. The global statistics then combine the rows
// (Chan et al.): N = sum n_p, mean = sum n_p mean_p / N, M2 = sum (m2_p + n_p (mean_p - mean)^2),
// var = M2 / N (biased, for normalizing; M2 / (N - 1) updates running_var, as torch). Uneven n_p
// are exact. Everything is a differentiable op and the sum's backward sums the gradient of the
// table over the processes, so backward reduces what torch's SyncBatchNorm reduces (the gradients
// of the per-process mean and variance terms, sum_dy and sum_dy_xmu) with one collective too; the
// result equals batch norm on the concatenated batch in one process. Statistics are computed in
// f32 at least (f16/bf16 inputs are upcast, as the autocast policy runs batch norm in f32).

Tensor sync_batch_norm(const Tensor& x, CrossProcessSum& sum, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, double momentum, double eps) {
  check_defined(x, "sync_batch_norm");
  KILN_CHECK(x.dim() == 4, "sync_batch_norm: expected input of shape (N, C, H, W), got ", x.shape());
  const int64_t c = x.size(1), procs = sum.size(), rank = sum.rank();
  const int64_t n_local = x.numel() / c;
  KILN_CHECK(n_local > 0, "sync_batch_norm: process ", rank, " has an empty batch ", x.shape(),
             "; every process needs at least one value per channel");
  const DType dt = (x.dtype() == DType::f16 || x.dtype() == DType::bf16) ? DType::f32 : x.dtype();
  const Tensor xs = x.to(dt);
  const std::vector<int64_t> dims{0, 2, 3};
  const Shape per_channel{1, c, 1, 1};

  // This process's row: (count, mean (C), m2 (C)), placed at row `rank` of a zero table.
  Tensor mean_p = kiln::mean(xs, dims);                                   // (C)
  Tensor m2_p = kiln::sum(square(xs - mean_p.view(per_channel)), dims);  // (C)
  const TensorOptions opts = TensorOptions(dt).device(x.device());
  Tensor row = cat({full({1}, double(n_local), opts), mean_p, m2_p}, 0);  // (1 + 2C)
  const int64_t width = 1 + 2 * c;
  std::vector<Tensor> parts;
  if (rank > 0) parts.push_back(zeros({rank * width}, opts));
  parts.push_back(row);
  if (rank + 1 < procs) parts.push_back(zeros({(procs - rank - 1) * width}, opts));
  Tensor table = sum.sum(cat(parts, 0)).view({procs, width});  // every process's row

  Tensor counts = table.narrow(1, 0, 1);     // (P, 1)
  Tensor means = table.narrow(1, 1, c);      // (P, C)
  Tensor m2s = table.narrow(1, 1 + c, c);    // (P, C)
  Tensor total = kiln::sum(counts);           // 0-dim
  Tensor mean = kiln::sum(counts * means, {0}) / total;                                  // (C)
  Tensor m2 = kiln::sum(m2s + counts * square(means - mean.view({1, c})), {0});           // (C)
  Tensor var = m2 / total;
  Tensor y = (xs - mean.view(per_channel)) * rsqrt(var + eps).view(per_channel);
  if (weight.defined()) y = y * weight.to(dt).view(per_channel);
  if (bias.defined()) y = y + bias.to(dt).view(per_channel);

  if (running_mean.defined() && running_var.defined()) {
    NoGradGuard no_grad;
    Tensor unbiased = m2 / (total - 1.0);
    Tensor rm = running_mean, rv = running_var;  // handles: the update lands in the buffers
    rm.copy_(rm * (1.0 - momentum) + mean.detach().to(rm.dtype()) * momentum);
    rv.copy_(rv * (1.0 - momentum) + unbiased.detach().to(rv.dtype()) * momentum);
  }
  return y.to(x.dtype());
}

}  // namespace kiln::nn
