// Seeded random numbers: a counter-based Philox-4x32-10 generator. Element i of a draw depends
// only on (seed, offset + i), so results are the same for any thread count and on the GPU (the
// draws themselves are in core/philox.h, shared with the CUDA kernels). Each draw advances the
// offset by the number of elements drawn.
#pragma once

#include <array>
#include <cstdint>

namespace kiln {

/// One Philox-4x32-10 block: four 32-bit words from a 128-bit counter and a 64-bit key.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, uint64_t key);

/// A seeded Philox generator (the file's header): a draw of n elements takes the counters
/// [offset, offset + n) and advances the offset by n.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5EEDull) : seed_(seed) {}

  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }  ///< the seed
  uint64_t offset() const { return offset_; }  ///< counters used so far: the next draw starts here
  void set_offset(uint64_t offset) { offset_ = offset; }  ///< resumes a stream (e.g. from a checkpoint)

  /// Reserves `n` counters and returns the first; the caller uses (seed(), first + i).
  uint64_t advance(uint64_t n) {
    uint64_t first = offset_;
    offset_ += n;
    return first;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

///@{
/// The process-wide default generator (like torch's default CPU generator).
Generator& default_generator();
void manual_seed(uint64_t seed);
///@}

///@{
/// Draws for element `index` of a stream: uniform in [0, 1), and standard normal (Box-Muller).
double philox_uniform(uint64_t seed, uint64_t index);
double philox_normal(uint64_t seed, uint64_t index);
///@}

}  // namespace kiln
