// Formulas that the CPU kernels (core/cpu) and the CUDA kernels (core/cuda/kernels) both compute,
// written once so the two backends cannot drift apart. CUDA-free: each backend passes its own math
// as `Math` (static exp, tanh, erf: core/cpu/vec_math.h VecMath, the CUDA functors' DeviceMath).
#pragma once

#include <array>
#include <type_traits>
#include <utility>

#include <kiln/core/host_device.h>
#include <kiln/core/shape.h>

namespace kiln::formulas {

// GELU, tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). In float,
// 1 + tanh(u) = 2 / (1 + exp(-2u)), which the CPU vectorizes and which stays exact in the tails.
template <class Math, class T>
KILN_HOST_DEVICE inline T gelu_tanh(T x) {
  const T u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
  if constexpr (std::is_same_v<T, float>) return x / (T(1) + Math::exp(T(-2) * u));
  else return T(0.5) * x * (T(1) + Math::tanh(u));
}

// g * d/dx gelu_tanh(x). With s = (1 + tanh u) / 2 = 1 / (1 + exp(-2u)) (so 1 - tanh^2 u =
// 4 s (1 - s)): s + 2 x s (1 - s) c (1 + 3 a x^2), finite in both tails.
template <class Math, class T>
KILN_HOST_DEVICE inline T gelu_tanh_backward(T g, T x) {
  const T c = T(0.7978845608028654), a = T(0.044715);
  const T x2 = x * x;
  const T u = c * (x + a * x2 * x);
  const T s = T(1) / (T(1) + Math::exp(T(-2) * u));
  return g * (s + T(2) * x * s * (T(1) - s) * c * (T(1) + T(3) * a * x2));
}

// GELU, exact: x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).
template <class Math, class T>
KILN_HOST_DEVICE inline T gelu_erf(T x) {
  return T(0.5) * x * (T(1) + Math::erf(x * T(0.70710678118654752440)));
}

// g * d/dx x Phi(x) = g (Phi(x) + x phi(x)).
template <class Math, class T>
KILN_HOST_DEVICE inline T gelu_erf_backward(T g, T x) {
  const T cdf = T(0.5) * (T(1) + Math::erf(x * T(0.70710678118654752440)));
  const T pdf = Math::exp(T(-0.5) * x * x) * T(0.39894228040143267794);  // 1 / sqrt(2 pi)
  return g * (cdf + x * pdf);
}

// Note [Collapsing dims]
// The strided loops of both backends (core/cpu/loops.h, core/cuda/plan/offset_calc.h) walk N
// operands of one logical shape. Size-1 dims are dropped, then dim d is merged into d+1 wherever
// every operand is laid out contiguously across the pair (stride[d] == stride[d+1] * size[d+1]),
// so contiguous and broadcast operands reach the loop as few, long dims. Strides are in any unit
// (bytes on the CPU, elements on CUDA). An empty result means one element (or a 0 dim was kept).
template <int N>
void collapse_dims(const Shape& shape, const std::array<Strides, N>& strides, Shape& out_shape,
                   std::array<Strides, N>& out_strides) {
  Shape sh;
  std::array<Strides, N> st;
  for (int64_t d = 0; d < shape.ndim(); ++d) {
    if (shape[d] == 1) continue;
    sh.push_back(shape[d]);
    for (int k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
  }
  for (int64_t d = sh.ndim() - 2; d >= 0; --d) {
    bool merge = true;
    for (int k = 0; k < N; ++k) merge = merge && st[k][d] == st[k][d + 1] * sh[d + 1];
    if (!merge) continue;
    sh[d] *= sh[d + 1];
    sh.erase(sh.begin() + d + 1);
    for (int k = 0; k < N; ++k) {
      st[k][d] = st[k][d + 1];
      st[k].erase(st[k].begin() + d + 1);
    }
  }
  out_shape = std::move(sh);
  out_strides = std::move(st);
}

}  // namespace kiln::formulas
