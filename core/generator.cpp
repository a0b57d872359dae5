// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
#include <kiln/core/generator.h>

#include <cmath>

namespace kiln {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(kMul0) * c[0];
    uint64_t p1 = uint64_t(kMul1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k1, uint32_t(p0)};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

static std::array<uint32_t, 4> block(uint64_t seed, uint64_t index) {
  return philox4x32({uint32_t(index), uint32_t(index >> 32), 0u, 0u}, seed);
}

double philox_uniform(uint64_t seed, uint64_t index) {
  auto w = block(seed, index);
  uint64_t bits = (uint64_t(w[0]) << 21) ^ (w[1] >> 11);  // 53 random bits
  return double(bits & ((1ull << 53) - 1)) * 0x1.0p-53;
}

double philox_normal(uint64_t seed, uint64_t index) {
  auto w = block(seed, index);
  uint64_t b0 = (uint64_t(w[0]) << 21) ^ (w[1] >> 11);
  uint64_t b1 = (uint64_t(w[2]) << 21) ^ (w[3] >> 11);
  double u1 = (double(b0 & ((1ull << 53) - 1)) + 1.0) * 0x1.0p-53;  // (0, 1]: log is finite
  double u2 = double(b1 & ((1ull << 53) - 1)) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

Generator& default_generator() {
  static Generator g(0x5EEDull);
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace kiln
