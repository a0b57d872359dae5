// Finite-difference gradient check (float64).
#include <kiln/autograd/gradcheck.h>

#include <cmath>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/factory.h>
#include <kiln/core/ops/elementwise.h>
#include <kiln/core/ops/reduce.h>

namespace kiln {

bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
               const GradcheckOptions& o) {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad())
      KILN_CHECK(inputs[i].dtype() == DType::f64 && inputs[i].is_leaf(), "gradcheck: input ", i,
                 " must be an f64 leaf, got ", inputs[i].dtype());
  Tensor out = fn(inputs);
  KILN_CHECK(out.defined() && out.requires_grad(), "gradcheck: the function's output does not require grad");
  Generator gen(o.seed_ + 12345);
  Tensor w = randn(out.shape(), gen, DType::f64);
  auto loss_of = [&](const Tensor& y) { return ops::sum(ops::mul(y.detach().to(DType::f64), w)).item(); };

  for (const Tensor& x : inputs)
    if (x.defined() && x.requires_grad()) x.set_grad(Tensor());
  // The gradient of L w.r.t. the output is w itself.
  out.backward(w.to(out.dtype()));

  NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    Tensor analytic = x.grad().defined() ? x.grad().contiguous() : zeros(x.shape(), DType::f64);
    KILN_CHECK(x.is_contiguous(), "gradcheck: input ", i, " must be contiguous");
    double* p = x.data<double>();
    const double* a = analytic.data<double>();
    for (int64_t k = 0; k < x.numel(); ++k) {
      double saved = p[k];
      p[k] = saved + o.eps_;
      double up = loss_of(fn(inputs));
      p[k] = saved - o.eps_;
      double down = loss_of(fn(inputs));
      p[k] = saved;
      double numeric = (up - down) / (2 * o.eps_);
      KILN_CHECK(std::fabs(a[k] - numeric) <= o.atol_ + o.rtol_ * std::fabs(numeric), "gradcheck: input ", i,
                 " (shape ", x.shape(), ") element ", k, ": analytic gradient ", a[k], " vs numeric ", numeric);
    }
  }
  return true;
}

}  // namespace kiln
