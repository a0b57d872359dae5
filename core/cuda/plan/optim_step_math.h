// The arithmetic of the fused optimizer kernels (optim_step.cu) and of GradScaler's device update
// (amp.cu), per element and per step, as host-and-device functions: the kernels call them, and a
// CPU test (tests/optim/test_optim_step_math.cpp) checks them against the CPU optimizers, whose
// loops they transcribe operation for operation. No CUDA headers.
#pragma once

#include <cmath>
#include <cstdint>

#include <kiln/core/host_device.h>

namespace kiln::cuda::math {

// --- AdamW (optim/adamw.cpp) ---------------------------------------------------------------------

// The step-independent coefficients, computed in double and rounded to T once (adamw.cpp's Coeffs).
template <class T>
struct AdamWCoeffs {
  T decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
};

template <class T>
KILN_HOST_DEVICE inline AdamWCoeffs<T> adamw_coeffs(double lr, double beta1, double beta2, double eps, double weight_decay) {
  return {T(1.0 - lr * weight_decay), T(beta1), T(1.0 - beta1), T(beta2), T(1.0 - beta2), T(eps)};
}

// The coefficients of update number t (1-based): the bias corrections 1 - beta^t in double.
template <class T>
struct AdamWStepCoeffs {
  T bias_correction2_sqrt, neg_step_size;
};

template <class T>
KILN_HOST_DEVICE inline AdamWStepCoeffs<T> adamw_step_coeffs(double lr, double beta1, double beta2, double t) {
  using std::pow;
  using std::sqrt;
  const double bias_correction1 = 1.0 - pow(beta1, t);
  const double bias_correction2 = 1.0 - pow(beta2, t);
  return {static_cast<T>(sqrt(bias_correction2)), static_cast<T>(-(lr / bias_correction1))};
}

// One element: p, m (exp_avg), v (exp_avg_sq) and, with amsgrad, vmax (max_exp_avg_sq) in place.
template <class T, bool kAmsgrad>
KILN_HOST_DEVICE inline void adamw_element(T& p, T g, T& m, T& v, T& vmax, const AdamWCoeffs<T>& c,
                                           const AdamWStepCoeffs<T>& s) {
  using std::sqrt;
  p = p * c.decay;                                     // param.mul_(1 - lr * wd)
  m = m * c.beta1 + c.one_minus_beta1 * g;             // exp_avg.mul_(b1).add_(g, 1 - b1)
  v = v * c.beta2 + c.one_minus_beta2 * g * g;         // exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2)
  T second = v;
  if constexpr (kAmsgrad) {
    vmax = vmax < v || v != v ? v : vmax;  // torch.maximum (NaN wins)
    second = vmax;
  }
  const T denom = sqrt(second) / s.bias_correction2_sqrt + c.eps;
  p = p + s.neg_step_size * m / denom;  // param.addcdiv_(m, denom, -step_size)
}

// --- SGD (optim/sgd.cpp) -------------------------------------------------------------------------

// Scalars rounded to T as ops::add_ / ops::mul_ round theirs.
template <class T>
struct SgdCoeffs {
  T weight_decay, momentum, one_minus_dampening, neg_lr;
  bool has_weight_decay, nesterov;
};

template <class T>
KILN_HOST_DEVICE inline SgdCoeffs<T> sgd_coeffs(double lr, double momentum, double dampening, double weight_decay, bool nesterov) {
  return {T(weight_decay), T(momentum), T(1.0 - dampening), T(-lr), weight_decay != 0.0, nesterov};
}

// Whether the momentum buffer starts as d_p in this update (sgd.cpp: it did not exist yet): it was
// created for this step (`fresh`), or this is the parameter's first real update (device step 1).
// Note [Fresh momentum buffers] in sgd.cpp covers the case this cannot see.
KILN_HOST_DEVICE inline bool sgd_first_update(bool fresh, int64_t step) { return fresh || step == 1; }

// One element: p and, with momentum, buf in place (buf is not read when `first`).
template <class T, bool kMomentum>
KILN_HOST_DEVICE inline void sgd_element(T& p, T g, T& buf, bool first, const SgdCoeffs<T>& c) {
  T d = g;
  if (c.has_weight_decay) d = d + c.weight_decay * p;  // d_p = g.clone().add_(p, wd)
  if constexpr (kMomentum) {
    if (first) {
      buf = d;  // buf = d_p
    } else {
      buf = buf * c.momentum;                // buf.mul_(momentum)
      buf = buf + c.one_minus_dampening * d;  // buf.add_(d_p, 1 - dampening)
    }
    d = c.nesterov ? d + c.momentum * buf : buf;  // d_p.add_(buf, momentum), or d_p = buf
  }
  p = p + c.neg_lr * d;  // p.add_(d_p, -lr)
}

// --- clip_grad_norm (optim/clip.cpp) -------------------------------------------------------------

// The total norm from the accumulated sum |g|^p (max |g| for the infinity norm).
KILN_HOST_DEVICE inline double norm_from_sum(double acc, double norm_type, bool inf_norm) {
  using std::pow;
  using std::sqrt;
  return inf_norm || norm_type == 1.0 ? acc : norm_type == 2.0 ? sqrt(acc) : pow(acc, 1.0 / norm_type);
}

KILN_HOST_DEVICE inline double clip_coef(double max_norm, double total) { return max_norm / (total + 1e-6); }

// --- GradScaler (optim/grad_scaler.cpp) ----------------------------------------------------------

// The f32 reciprocal of the scale, computed in double (torch: scale.double().reciprocal().float()).
KILN_HOST_DEVICE inline float inv_scale(float scale) { return static_cast<float>(1.0 / static_cast<double>(scale)); }

// torch._amp_update_scale_: backoff on inf, growth after growth_interval clean steps (kept only if
// finite); products in double, rounded to f32.
KILN_HOST_DEVICE inline void update_scale(float& scale, int64_t& growth_tracker, bool found_inf, double growth_factor,
                                          double backoff_factor, int64_t growth_interval) {
  using std::isfinite;
  if (found_inf) {
    scale = static_cast<float>(static_cast<double>(scale) * backoff_factor);
    growth_tracker = 0;
  } else if (growth_tracker + 1 == growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(scale) * growth_factor);
    if (isfinite(grown)) scale = grown;
    growth_tracker = 0;
  } else {
    ++growth_tracker;
  }
}

}  // namespace kiln::cuda::math
