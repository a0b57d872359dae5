// 16-bit floating types stored as bits: BFloat16 (8-bit exponent) and Half (IEEE binary16).
// Conversions from float round to nearest even; NaN stays NaN (quiet) and inf stays inf.
// Arithmetic happens in float: every kernel loads to float, computes, and rounds once.
#pragma once

#include <bit>
#include <cstdint>

namespace kiln {

namespace detail {

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline float bf16_bits_to_float(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

inline uint16_t float_to_half_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u)  // inf or NaN (NaN keeps its top payload bits and becomes quiet)
    return static_cast<uint16_t>(sign | 0x7C00u | (ax > 0x7F800000u ? 0x0200u | ((ax >> 13) & 0x3FFu) : 0u));
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past 65504
  if (ax < 0x38800000u) {
    // |f| < 2^-14: a half subnormal. Adding 0.5f aligns the float ulp to 2^-24 (the half
    // subnormal step), so the FPU's own round-to-nearest-even does the rounding.
    float r = std::bit_cast<float>(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(r) - 0x3F000000u));
  }
  uint32_t odd = (ax >> 13) & 1u;
  ax += 0xC8000FFFu + odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (ax >> 13));
}

inline float half_bits_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1Fu) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  if (exp == 0) {
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(v));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace detail

/// A 16-bit float stored as its bits, converted to and from float by its format's two functions.
/// BFloat16 and Half are two instances, so two distinct types.
template <uint16_t (*FromFloat)(float), float (*ToFloat)(uint16_t)>
struct Float16Bits {
  uint16_t bits = 0;
  Float16Bits() = default;
  Float16Bits(float f) : bits(FromFloat(f)) {}  // NOLINT: implicit like torch
  operator float() const { return ToFloat(bits); }
  static Float16Bits from_bits(uint16_t b) {
    Float16Bits r;
    r.bits = b;
    return r;
  }
};

/// bfloat16 and IEEE half: 16-bit storage types that convert to and from float.
using BFloat16 = Float16Bits<detail::float_to_bf16_bits, detail::bf16_bits_to_float>;
using Half = Float16Bits<detail::float_to_half_bits, detail::half_bits_to_float>;

static_assert(sizeof(BFloat16) == 2 && sizeof(Half) == 2);

}  // namespace kiln
