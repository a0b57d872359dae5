// CIFAR augmentation and normalization on the host: random crop from a reflect-padded image,
// horizontal flip, and per-channel (x / 255 - mean) / std to f32. Every random choice is a pure
// function of (seed, epoch, rank, sample index), so results do not depend on thread count.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include <kiln/core/tensor.h>
#include <kiln/data/cifar10.h>

namespace kiln::data {

/// The CIFAR-10 training set's per-channel mean and std of x / 255 (the values torchvision users use).
inline constexpr std::array<float, 3> kCifarMean = {0.4914f, 0.4822f, 0.4465f};
inline constexpr std::array<float, 3> kCifarStd = {0.2470f, 0.2435f, 0.2616f};

/// Note [CIFAR augmentation]
/// Crop: the image is padded by `crop_padding` pixels on each side by reflection (as airbench,
/// "reflect" mode: no border copied twice, no black frame), and a 32x32 window at offset
/// (dy, dx) in [0, 2 * padding]^2 is taken, so content moves by dy - padding, dx - padding.
/// Flip: the cropped image is mirrored left-right with probability 1/2.
/// The draws for sample `index` come from Philox with key mix(seed, epoch, rank) and counters
/// 3 * index .. 3 * index + 2 (dy, dx, flip). A sample augmented twice with the same
/// (seed, epoch, rank) is augmented the same way; a new epoch or another rank draws anew.
struct AugmentOptions {
  int64_t crop_padding_ = 4;  ///< 0: no crop
  bool flip_ = true;
  uint64_t seed_ = 0;
  std::array<float, 3> mean_ = kCifarMean;
  std::array<float, 3> std_ = kCifarStd;

  AugmentOptions& crop_padding(int64_t p) { crop_padding_ = p; return *this; }
  AugmentOptions& flip(bool f) { flip_ = f; return *this; }
  AugmentOptions& seed(uint64_t s) { seed_ = s; return *this; }
  AugmentOptions& mean(std::array<float, 3> m) { mean_ = m; return *this; }
  AugmentOptions& std(std::array<float, 3> s) { std_ = s; return *this; }
  /// Normalization only (evaluation): no crop, no flip.
  static AugmentOptions eval() { return AugmentOptions().crop_padding(0).flip(false); }
};

/// The random choices for one sample (Note [CIFAR augmentation]).
struct AugmentDraw {
  int64_t dy = 0, dx = 0;  ///< window offset in the padded image, in [0, 2 * crop_padding]
  bool flip = false;
};
AugmentDraw augment_draw(const AugmentOptions& options, int64_t epoch, int64_t rank, int64_t index);

/// One image: src u8 (3, H, W) -> dst f32 (3, H, W), cropped, flipped and normalized per `draw`.
void augment_image(const uint8_t* src, float* dst, int64_t height, int64_t width, const AugmentDraw& draw,
                   const AugmentOptions& options);

/// Normalization only: images u8 (N, 3, H, W) -> f32 (N, 3, H, W).
Tensor normalize(const Tensor& images, const std::array<float, 3>& mean = kCifarMean,
                 const std::array<float, 3>& std = kCifarStd);

/// Gathers data.images[indices[i]] into a new f32 (B, 3, 32, 32) batch, each augmented with the
/// draw for its dataset index (indices[i]) and normalized; single-threaded (loader workers call it).
Tensor augment_gather(const Cifar10Dataset& data, std::span<const int64_t> indices, int64_t epoch, int64_t rank,
                      const AugmentOptions& options);

}  // namespace kiln::data
