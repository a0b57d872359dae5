// clip_grad_norm: a deterministic blocked reduction in double over every gradient (the result
// does not depend on the thread count), then one in-place scale per gradient with kiln::ops. On
// CUDA: the same reduction and scale as multi-tensor kernels (core/cuda/kernels/optim_step.h).
#include <kiln/optim/clip.h>

#include <cmath>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/cuda/kernels/optim_step.h>
#include <kiln/core/cuda/runtime/runtime.h>
#include <kiln/core/dispatch.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/parallel.h>

namespace kiln::optim {

namespace {

constexpr int64_t kBlock = 8192;  // elements per partial sum; partials are combined in order

// max that lets NaN win, like torch.max.
double nan_max(double a, double b) { return std::isnan(a) || a > b ? a : b; }

// sum |x|^p (or max |x| when inf_norm) over a contiguous CPU tensor, in double.
double reduce_grad(const Tensor& g, double p, bool inf_norm) {
  const int64_t n = g.numel();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  dispatch_floating(g.dtype(), "clip_grad_norm", [&]<class T>() {
    const T* x = g.data<T>();
    parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        double acc = 0.0;
        const int64_t end = std::min(n, (b + 1) * kBlock);
        for (int64_t i = b * kBlock; i < end; ++i) {
          const double a = std::fabs(static_cast<double>(x[i]));
          if (inf_norm)
            acc = nan_max(acc, a);
          else if (p == 2.0)
            acc += a * a;
          else if (p == 1.0)
            acc += a;
          else
            acc += std::pow(a, p);
        }
        partial[static_cast<size_t>(b)] = acc;
      }
    });
  });
  double total = 0.0;
  for (double v : partial) total = inf_norm ? nan_max(total, v) : total + v;
  return total;
}

void check_nonfinite(double total, double norm_type, bool error_if_nonfinite) {
  KILN_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm: the total norm of order ", norm_type,
             " of the gradients is ", total, "; refusing to clip (error_if_nonfinite=true)");
}

double clip_cpu(std::vector<Tensor>& grads, double max_norm, double norm_type, bool error_if_nonfinite) {
  const bool inf_norm = std::isinf(norm_type);
  double acc = 0.0;
  for (const Tensor& g : grads) {
    const double r = reduce_grad(g.contiguous(), norm_type, inf_norm);
    acc = inf_norm ? nan_max(acc, r) : acc + r;
  }
  const double total = inf_norm || norm_type == 1.0 ? acc : norm_type == 2.0 ? std::sqrt(acc)
                                                                             : std::pow(acc, 1.0 / norm_type);
  check_nonfinite(total, norm_type, error_if_nonfinite);
  const double coef = max_norm / (total + 1e-6);
  // min(1, coef) with NaN propagating (torch.clamp); a factor of exactly 1 changes nothing.
  if (!(coef >= 1.0))
    for (Tensor& g : grads) ops::mul_(g, coef);
  return total;
}

// The same on one CUDA device: the norm, the coefficient and the scaling stay there.
Tensor clip_cuda(std::vector<Tensor>& grads, double max_norm, double norm_type, bool error_if_nonfinite) {
  std::vector<Tensor> work;  // contiguous: the gradients themselves, or copies written back
  for (const Tensor& g : grads) work.push_back(g.contiguous());
  Tensor total;
  if constexpr (cuda::kBuilt) {
    cuda::GradNorm norm = cuda::grad_norm(work, norm_type, max_norm);
    if (error_if_nonfinite) check_nonfinite(norm.total.item(), norm_type, true);  // the one host read
    cuda::clip_grads(work, norm.clip_coef);
    total = norm.total;
  }
  for (size_t i = 0; i < grads.size(); ++i)
    if (!work[i].is_same(grads[i])) grads[i].copy_(work[i]);
  return total;
}

// The gradients of `params` (skipping those without one), checked to share a device.
std::vector<Tensor> grads_of(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  KILN_CHECK(norm_type > 0.0, "clip_grad_norm: norm_type must be > 0 or kInfNorm, got ", norm_type);
  KILN_CHECK(max_norm >= 0.0, "clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (!p.defined() || !p.grad().defined()) continue;
    Tensor g = p.grad();
    KILN_CHECK(grads.empty() || g.device() == grads[0].device(), "clip_grad_norm: gradients on ",
               grads.empty() ? g.device() : grads[0].device(), " and on ", g.device(),
               "; all gradients must be on one device");
    grads.push_back(g);
  }
  return grads;
}

}  // namespace

Tensor clip_grad_norm_tensor(const std::vector<Tensor>& params, double max_norm, double norm_type,
                             bool error_if_nonfinite) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads = grads_of(params, max_norm, norm_type);
  if (grads.empty()) return scalar_tensor(0.0, TensorOptions(DType::f64));
  if (grads[0].device().is_cuda()) return clip_cuda(grads, max_norm, norm_type, error_if_nonfinite);
  return scalar_tensor(clip_cpu(grads, max_norm, norm_type, error_if_nonfinite), TensorOptions(DType::f64));
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads = grads_of(params, max_norm, norm_type);
  if (grads.empty()) return 0.0;
  if (grads[0].device().is_cuda()) return clip_cuda(grads, max_norm, norm_type, error_if_nonfinite).item();
  return clip_cpu(grads, max_norm, norm_type, error_if_nonfinite);
}

}  // namespace kiln::optim
