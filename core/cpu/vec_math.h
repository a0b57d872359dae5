// Branch-free float math that the compiler vectorizes (libm's expf is a scalar call).
// exp_f32: Cody-Waite reduction x = n*ln2 + r, degree-7 Taylor polynomial on |r| <= ln2/2
// (truncation error < 1e-8 relative), 2^n applied in two halves so subnormal results survive.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace kiln::cpu {

inline float exp_f32(float x) {
  float xc = x < -104.0f ? -104.0f : (x > 88.8f ? 88.8f : x);
  // n = round(x / ln2) by the 1.5 * 2^23 shift, which also leaves n's bits in t: no float -> int
  // conversion, which GCC does not vectorize under its default -ftrapping-math.
  constexpr float kShift = 12582912.0f;
  float t = xc * 1.44269504088896341f + kShift;
  float n = t - kShift;
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
  int32_t ni = std::bit_cast<int32_t>(t) - 0x4B400000;
  int32_t n1 = ni / 2, n2 = ni - n1;
  float s1 = std::bit_cast<float>((n1 + 127) << 23);
  float s2 = std::bit_cast<float>((n2 + 127) << 23);
  float y = p * s1 * s2;
  return x != x ? x : y;  // NaN in, NaN out
}

inline float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

// GELU with the tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with
// 1 + tanh(u) = 2 / (1 + exp(-2u)) so it stays vectorizable and exact in the tails.
inline float gelu_tanh_f32(float x) {
  float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + exp_f32(-2.0f * u));
}

template <class T>
inline T exp_any(T x) {
  if constexpr (std::is_same_v<T, float>) return exp_f32(x); else return std::exp(x);
}

}  // namespace kiln::cpu
