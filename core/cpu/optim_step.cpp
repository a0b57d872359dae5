// AdamW's per-element update on the CPU: one fused pass, no temporaries, torch's operations in
// torch's order, each rounded to the parameter's dtype (optim/adamw.cpp has the front).
#include <kiln/core/cpu/optim_step.h>

#include <cmath>

#include <kiln/core/parallel.h>

namespace kiln::cpu::KILN_CPU_CAP {  // Note [CPU capabilities]

namespace {

template <class T>
void adamw_loop(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const ops::AdamWCoeffs& cd) {
  const T decay = T(cd.decay), beta1 = T(cd.beta1), one_minus_beta1 = T(cd.one_minus_beta1), beta2 = T(cd.beta2),
          one_minus_beta2 = T(cd.one_minus_beta2), bc2_sqrt = T(cd.bias_correction2_sqrt), eps = T(cd.eps),
          neg_step_size = T(cd.neg_step_size);
  parallel_for(0, n, kGrainSize, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T gi = g[i];
      p[i] = p[i] * decay;                                   // param.mul_(1 - lr * wd)
      m[i] = m[i] * beta1 + one_minus_beta1 * gi;            // exp_avg.mul_(b1).add_(g, 1 - b1)
      v[i] = v[i] * beta2 + one_minus_beta2 * gi * gi;       // exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2)
      T second = v[i];
      if (vmax) {
        vmax[i] = vmax[i] < v[i] || std::isnan(v[i]) ? v[i] : vmax[i];  // torch.maximum (NaN wins)
        second = vmax[i];
      }
      const T denom = std::sqrt(second) / bc2_sqrt + eps;
      p[i] = p[i] + neg_step_size * m[i] / denom;           // param.addcdiv_(m, denom, -step_size)
    }
  });
}

}  // namespace

void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                  const ops::AdamWCoeffs& c) {
  auto run = [&]<class T>() {
    adamw_loop<T>(p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), vmax.defined() ? vmax.data<T>() : nullptr,
                  p.numel(), c);
  };
  if (p.dtype() == DType::f64)
    run.template operator()<double>();
  else
    run.template operator()<float>();
}

}  // namespace kiln::cpu::KILN_CPU_CAP
