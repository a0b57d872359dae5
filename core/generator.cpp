// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11); the
// arithmetic is in core/philox.h so CUDA kernels draw the same numbers.
#include <kiln/core/generator.h>

#include <kiln/core/philox.h>

namespace kiln {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, uint64_t key) {
  philox::Block b = philox::philox4x32(philox::Block{{c[0], c[1], c[2], c[3]}}, key);
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
}

double philox_uniform(uint64_t seed, uint64_t index) { return philox::uniform(seed, index); }
double philox_normal(uint64_t seed, uint64_t index) { return philox::normal(seed, index); }

Generator& default_generator() {
  static Generator g(0x5EEDull);
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace kiln
