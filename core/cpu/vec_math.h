// Branch-free float math that the compiler vectorizes (libm's expf is a scalar call).
// exp_f32: Cody-Waite reduction x = n*ln2 + r, degree-7 Taylor polynomial on |r| <= ln2/2
// (truncation error < 1e-8 relative), 2^n applied in two halves so subnormal results survive.
// erf_f32: two least-squares fits (below), 2-3 ulp.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <kiln/core/formulas.h>

namespace kiln::cpu {

inline float exp_f32(float x) {
  // The clamps are spelled as x86's maxps/minps (a > b ? a : b, which returns b when either is
  // NaN): one instruction each, and a NaN x stays NaN through to the result, where the nested
  // select and a final `x != x ? x : y` took eight compares and blends per vector on AVX2
  // (exp 10% slower). The same bits for every x but a NaN, which may come back another NaN.
  float xc = -104.0f > x ? -104.0f : x;
  xc = 88.8f < xc ? 88.8f : xc;
  // Adding 1.5 * 2^23 rounds to the nearest integer n and leaves n in the low mantissa bits
  // (std::floor / float->int conversions stop GCC from vectorizing the loop).
  float z = xc * 1.44269504088896341f + 12582912.0f;
  float n = z - 12582912.0f;
  int32_t ni = std::bit_cast<int32_t>(z) - 0x4B400000;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t n1 = ni >> 1, n2 = ni - n1;  // n in [-150, 128]: both halves give normal scales
  // Unsigned: for a NaN x, ni is garbage and a signed multiply would overflow (UB, found by
  // scripts/sanitize.sh ubsan); p is NaN then, so the product is NaN whatever the scales.
  float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  return p * s1 * s2;  // NaN in, NaN out (through the clamps and p)
}

// erf_f32, two least-squares fits made for Kiln, both branches computed and one selected (so loops
// vectorize where libm's erff is a scalar call): |x| < 1: x P(x^2); else 1 - exp(-x^2) R(1/x), where
// R fits erfc(x) exp(x^2) on [1, 4] (|x| is clamped to 4: erf(4) is 1 in f32). Max error 1.5e-7
// absolute (2-3 ulp) in f32 arithmetic.
inline float erf_f32(float x) {
  float a = x < 0.0f ? -x : x;
  a = a > 4.0f ? 4.0f : a;
  const float t = a * a;
  float p = 7.971032754007162e-05f;
  p = p * t + -8.043369067278394e-04f;
  p = p * t + 5.191832698589478e-03f;
  p = p * t + -2.685550891456224e-02f;
  p = p * t + 1.1283622038489496e-01f;
  p = p * t + -3.7612628734449083e-01f;
  p = p * t + 1.128379166095465f;
  const float u = 1.0f / (a < 1.0f ? 1.0f : a);
  float r = -1.3518392560017934e-02f;
  r = r * u + 4.782960310755896e-02f;
  r = r * u + -1.50587815725763e-02f;
  r = r * u + -1.9863184402130699e-01f;
  r = r * u + 4.6777480684251804e-01f;
  r = r * u + -4.5945792489459675e-01f;
  r = r * u + 3.892628313484559e-02f;
  r = r * u + 5.594752127701488e-01f;
  r = r * u + 2.4450254067229167e-04f;
  const float m = a < 1.0f ? a * p : 1.0f - exp_f32(-t) * r;
  const float y = x < 0.0f ? -m : m;
  return x != x ? x : y;  // NaN in, NaN out
}

template <class T>
inline T erf_any(T x) {
  if constexpr (std::is_same_v<T, float>) return erf_f32(x); else return std::erf(x);
}

inline float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

template <class T>
inline T exp_any(T x) {
  if constexpr (std::is_same_v<T, float>) return exp_f32(x); else return std::exp(x);
}

// The CPU's math for the shared formulas of core/formulas.h: exp_f32 and erf_f32 for float, libm
// otherwise.
struct VecMath {
  template <class T> static T exp(T x) { return exp_any(x); }
  template <class T> static T log(T x) { return std::log(x); }
  template <class T> static T sqrt(T x) { return std::sqrt(x); }
  template <class T> static T tanh(T x) { return std::tanh(x); }
  template <class T> static T sin(T x) { return std::sin(x); }
  template <class T> static T cos(T x) { return std::cos(x); }
  template <class T> static T erf(T x) { return erf_any(x); }
  template <class T> static T pow(T x, T y) { return std::pow(x, y); }
};

// GELU with the tanh approximation (formulas::gelu_tanh: vectorizable, exact in the tails).
inline float gelu_tanh_f32(float x) { return formulas::gelu_tanh<VecMath>(x); }

}  // namespace kiln::cpu
