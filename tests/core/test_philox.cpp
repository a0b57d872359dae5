// Philox-4x32-10 and the draws built on it (core/philox.h), on the CPU: the published known-answer
// vectors, the uniform's 53 bits, and the fma-only log/cos of the normal transform against libm.
// The CUDA side runs the same header; tests/core/test_cuda_random.cpp compares the two bitwise.
#include "test_util.h"

#include <kiln/core/philox.h>

#include <cmath>

using namespace kiln;

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors") {
  // (counter, key as key[0] | key[1] << 32) -> output, from Random123's kat_vectors.
  auto a = philox4x32({0u, 0u, 0u, 0u}, 0ull);
  CHECK(a == std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  auto b = philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffffffffffull);
  CHECK(b == std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  auto c = philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0x299f31d0a4093822ull);
  CHECK(c == std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("the uniform draw is 53 bits of one block scaled to [0, 1)") {
  for (uint64_t i : {0ull, 1ull, 12345ull, (1ull << 40) + 7}) {
    auto w = philox4x32({uint32_t(i), uint32_t(i >> 32), 0u, 0u}, 99);
    uint64_t bits = ((uint64_t(w[0]) << 21) ^ (w[1] >> 11)) & ((1ull << 53) - 1);
    CHECK(philox_uniform(99, i) == double(bits) * 0x1.0p-53);
  }
}

TEST_CASE("log_unit is within three ulp of std::log on (0, 1]") {
  double worst = 0;
  for (double u : {1.0, 0x1.0p-53, 0.5, 0.70710678118654746, 0.70710678118654757, 0.999999999, 1e-300}) {
    double e = std::log(u), a = philox::log_unit(u);
    worst = std::max(worst, e == 0 ? std::fabs(a) : std::fabs(a - e) / std::fabs(e));
  }
  for (uint64_t i = 0; i < 200000; ++i) {
    double u = (double(philox::bits53(uint32_t(i * 2654435761u), uint32_t(i * 40503u + 17))) + 1.0) * 0x1.0p-53;
    double e = std::log(u), a = philox::log_unit(u);
    worst = std::max(worst, e == 0 ? std::fabs(a) : std::fabs(a - e) / std::fabs(e));
  }
  CHECK(philox::log_unit(1.0) == 0.0);
  CHECK(worst < 6e-16);  // about three ulps where e ln2 and log m partly cancel
}

TEST_CASE("cos_2pi_bits53 is within 1e-15 of std::cos(2 pi u), with the quadrants right") {
  auto ref = [](uint64_t b) { return std::cos(2.0 * M_PI * (double(b) * 0x1.0p-53)); };
  double worst = 0;
  for (uint64_t b = 0; b < 300000; ++b) {
    uint64_t bits = (b * 0x9E3779B97F4A7C15ull) >> 11;  // spread over [0, 2^53)
    worst = std::max(worst, std::fabs(philox::cos_2pi_bits53(bits) - ref(bits)));
  }
  CHECK(worst < 1e-15);
  CHECK(philox::cos_2pi_bits53(0) == 1.0);
  CHECK(philox::cos_2pi_bits53(1ull << 52) == -1.0);  // u = 1/2
  CHECK(std::fabs(philox::cos_2pi_bits53(1ull << 51)) < 1e-16);  // u = 1/4
  CHECK(std::fabs(philox::cos_2pi_bits53((1ull << 53) - 1) - 1.0) < 1e-15);  // just under 1
}

TEST_CASE("the normal draw matches Box-Muller computed with libm") {
  double worst = 0;
  for (uint64_t i = 0; i < 200000; ++i) {
    philox::Block w = philox::block(7, i);
    double u1 = (double(philox::bits53(w.w[0], w.w[1])) + 1.0) * 0x1.0p-53;
    double u2 = double(philox::bits53(w.w[2], w.w[3])) * 0x1.0p-53;
    double e = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    worst = std::max(worst, std::fabs(philox_normal(7, i) - e) / std::max(1.0, std::fabs(e)));
  }
  CHECK(worst < 8e-15);  // libm's own 2 pi u rounding, times a radius up to ~6
}
