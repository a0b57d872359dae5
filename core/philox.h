// Philox-4x32-10 and the draws built on it (uniform, normal), shared by the CPU factories and
// the CUDA kernels: element i of a draw is a pure function of (seed, offset + i), and the same
// bits on the CPU and the GPU. See Note [Bitwise-equal draws].
#pragma once

#include <cmath>
#include <cstdint>

#include <kiln/core/host_device.h>

// Note [Bitwise-equal draws]
// A CUDA rand/randn/dropout must give the very values the CPU gives for the same generator
// state. Philox and the 53-bit uniform are integer work, so that part is easy. The normal
// needs log and cos, and libm's and CUDA's differ in the last bit, so both sides use the
// functions below instead, written with operations IEEE rounds the same everywhere (+ - * /,
// sqrt, floor, frexp) and with every multiply-add spelled as fma(): host compilers (g++ with
// -march=native) and nvcc both contract a*b+c on their own, each in its own places, so no a*b
// may feed an addition here except through fma(). They are accurate to about one ulp, enough
// for a random-number transform; they are not meant as general math functions.

namespace kiln::philox {

struct Block {
  uint32_t w[4];
};

// One Philox-4x32-10 block: four 32-bit words from a 128-bit counter and a 64-bit key.
KILN_HOST_DEVICE inline Block philox4x32(Block c, uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(kMul0) * c.w[0];
    uint64_t p1 = uint64_t(kMul1) * c.w[2];
    c = Block{{uint32_t(p1 >> 32) ^ c.w[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c.w[3] ^ k1, uint32_t(p0)}};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

// The block of element `index` of the stream `seed`.
KILN_HOST_DEVICE inline Block block(uint64_t seed, uint64_t index) {
  return philox4x32(Block{{uint32_t(index), uint32_t(index >> 32), 0u, 0u}}, seed);
}

// 53 random bits from two words.
KILN_HOST_DEVICE inline uint64_t bits53(uint32_t hi, uint32_t lo) {
  return ((uint64_t(hi) << 21) ^ (lo >> 11)) & ((1ull << 53) - 1);
}

KILN_HOST_DEVICE inline double fma_(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return ::fma(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// Horner's rule, every step an fma_: ((k[0] z + k[1]) z + ...) z + k[N-1] (highest power first).
template <int N>
KILN_HOST_DEVICE inline double horner(double z, const double (&k)[N]) {
  double r = k[0];
  for (int i = 1; i < N; ++i) r = fma_(r, z, k[i]);
  return r;
}

// The series below as coefficient tables for horner(), highest power first, made at compile time:
// each is an exact integer ratio rounded once by IEEE division (n! is exact in a double up to
// n = 18), the very doubles a table of hex literals would hold.
template <int N>
struct Series {
  double k[N];
};
KILN_HOST_DEVICE constexpr double factorial(int n) { return n < 2 ? 1.0 : n * factorial(n - 1); }
// 1/n for n = top, top - 2, ... (atanh's odd powers).
template <int N>
KILN_HOST_DEVICE constexpr Series<N> inverse_odds(int top) {
  Series<N> s{};
  for (int i = 0; i < N; ++i) s.k[i] = 1.0 / (top - 2 * i);
  return s;
}
// (-1)^(n/2) / n! for n = top, top - 2, ... (cos from an even top, sin / x from an odd one).
template <int N>
KILN_HOST_DEVICE constexpr Series<N> inverse_factorials(int top) {
  Series<N> s{};
  for (int i = 0; i < N; ++i) {
    const int n = top - 2 * i;
    s.k[i] = ((n / 2) % 2 ? -1.0 : 1.0) / factorial(n);
  }
  return s;
}

// Spot checks against the hex literals these tables replaced.
static_assert(inverse_odds<11>(23).k[0] == 0x1.642c8590b2164p-5 && inverse_odds<11>(23).k[5] == 0x1.3b13b13b13b14p-4);
static_assert(inverse_factorials<10>(18).k[0] == -0x1.6827863b97d97p-53 && inverse_factorials<10>(18).k[9] == 1.0);
static_assert(inverse_factorials<8>(17).k[0] == 0x1.952c77030ad4ap-49 &&
              inverse_factorials<8>(17).k[6] == 0x1.1111111111111p-7);

// log(u) for u in (0, 1]: u = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s) with
// s = (m - 1) / (m + 1), |s| < 0.172, summed to s^23 (truncation below 1e-18 relative).
KILN_HOST_DEVICE inline double log_unit(double u) {
  int e = 0;
#if defined(__CUDA_ARCH__)
  double m = ::frexp(u, &e);  // m in [0.5, 1), exact
#else
  double m = std::frexp(u, &e);
#endif
  if (m < 0x1.6a09e667f3bcdp-1) {  // sqrt(1/2)
    m = m * 2.0;
    e -= 1;
  }
  const double f = m - 1.0;  // exact (Sterbenz)
  const double s = f / (m + 1.0);
  const double z = s * s;
  constexpr Series<11> kOdd = inverse_odds<11>(23);  // 1/23 ... 1/3
  const double p = horner(z, kOdd.k);
  const double s3 = s * z;
  const double atanh_s = fma_(s3, p, s);                              // s + s^3/3 + s^5/5 + ...
  return fma_(static_cast<double>(e), 0x1.62e42fefa39efp-1, 2.0 * atanh_s);  // e ln2 + log m
}

// cos(2 pi u) for u = b / 2^53, b a 53-bit integer: 4u = q + f with q the nearest integer and
// f in [-1/2, 1/2) taken exactly from b's bits, then cos(q pi/2 + x) with x = f pi/2 is
// +-cos x or +-sin x, |x| <= pi/4, by Taylor series to x^17 / x^18 (below 1e-19 relative).
KILN_HOST_DEVICE inline double cos_2pi_bits53(uint64_t b) {
  const uint64_t q = (b + (1ull << 50)) >> 51;                        // round(b / 2^51), 0..4
  const int64_t f = static_cast<int64_t>(b) - static_cast<int64_t>(q << 51);  // [-2^50, 2^50)
  const double x = static_cast<double>(f) * 0x1.0p-51 * 0x1.921fb54442d18p+0;  // f/2^51 * pi/2
  const double z = x * x;
  constexpr Series<10> kCos = inverse_factorials<10>(18);  // -1/18! ... -1/2!, 1
  constexpr Series<8> kSin = inverse_factorials<8>(17);   // 1/17! ... -1/3!
  const double cos_x = horner(z, kCos.k);
  const double s = horner(z, kSin.k);
  const double x3 = x * z;
  const double sin_x = fma_(x3, s, x);
  switch (q & 3) {
    case 0: return cos_x;
    case 1: return -sin_x;
    case 2: return -cos_x;
    default: return sin_x;
  }
}

// Uniform in [0, 1) with 53 random bits.
KILN_HOST_DEVICE inline double uniform(uint64_t seed, uint64_t index) {
  const Block w = block(seed, index);
  return static_cast<double>(bits53(w.w[0], w.w[1])) * 0x1.0p-53;
}

// Standard normal by Box-Muller: sqrt(-2 log u1) cos(2 pi u2), u1 in (0, 1] so log is finite.
KILN_HOST_DEVICE inline double normal(uint64_t seed, uint64_t index) {
  const Block w = block(seed, index);
  const double u1 = (static_cast<double>(bits53(w.w[0], w.w[1])) + 1.0) * 0x1.0p-53;
#if defined(__CUDA_ARCH__)
  const double r = ::sqrt(-2.0 * log_unit(u1));
#else
  const double r = std::sqrt(-2.0 * log_unit(u1));
#endif
  return r * cos_2pi_bits53(bits53(w.w[2], w.w[3]));
}

}  // namespace kiln::philox
