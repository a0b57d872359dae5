// CIFAR crop/flip/normalize (Note [CIFAR augmentation] in augment.h): the draws, the per-image
// kernel and the batch gather the data loader's workers run.
#include <kiln/data/augment.h>

#include <algorithm>

#include <kiln/core/factory.h>
#include <kiln/core/generator.h>

namespace kiln::data {

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Reflect index i into [0, n) ("reflect": -1 -> 1, n -> n - 2); valid for |overhang| < n.
int64_t reflect(int64_t i, int64_t n) {
  if (i < 0) return -i;
  if (i >= n) return 2 * (n - 1) - i;
  return i;
}

void check_options(const AugmentOptions& o, int64_t height, int64_t width) {
  KILN_CHECK(o.crop_padding_ >= 0 && o.crop_padding_ < std::min(height, width), "augment: crop_padding ",
             o.crop_padding_, " must be in [0, ", std::min(height, width), ") for ", height, "x", width, " images");
  for (int c = 0; c < 3; ++c) KILN_CHECK(o.std_[c] > 0, "augment: std[", c, "] must be positive, got ", o.std_[c]);
}

}  // namespace

AugmentDraw augment_draw(const AugmentOptions& options, int64_t epoch, int64_t rank, int64_t index) {
  KILN_CHECK(index >= 0, "augment_draw: sample index must be >= 0, got ", index);
  const uint64_t key = mix(mix(mix(options.seed_) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(rank));
  const uint64_t base = 3 * static_cast<uint64_t>(index);
  const int64_t span = 2 * options.crop_padding_ + 1;
  AugmentDraw d;
  d.dy = std::min<int64_t>(static_cast<int64_t>(philox_uniform(key, base) * span), span - 1);
  d.dx = std::min<int64_t>(static_cast<int64_t>(philox_uniform(key, base + 1) * span), span - 1);
  d.flip = options.flip_ && philox_uniform(key, base + 2) < 0.5;
  return d;
}

void augment_image(const uint8_t* src, float* dst, int64_t height, int64_t width, const AugmentDraw& draw,
                   const AugmentOptions& options) {
  const int64_t pad = options.crop_padding_;
  KILN_CHECK(draw.dy >= 0 && draw.dy <= 2 * pad && draw.dx >= 0 && draw.dx <= 2 * pad, "augment_image: offset (",
             draw.dy, ", ", draw.dx, ") is outside [0, ", 2 * pad, "]");
  for (int64_t c = 0; c < 3; ++c) {
    const float scale = 1.0f / (255.0f * options.std_[c]);
    const float shift = options.mean_[c] / options.std_[c];
    const uint8_t* plane = src + c * height * width;
    float* out = dst + c * height * width;
    for (int64_t y = 0; y < height; ++y) {
      const uint8_t* row = plane + reflect(y + draw.dy - pad, height) * width;
      for (int64_t x = 0; x < width; ++x) {
        const int64_t xs = draw.flip ? width - 1 - x : x;  // mirror of the cropped image
        out[y * width + x] = static_cast<float>(row[reflect(xs + draw.dx - pad, width)]) * scale - shift;
      }
    }
  }
}

Tensor normalize(const Tensor& images, const std::array<float, 3>& mean, const std::array<float, 3>& std) {
  KILN_CHECK(images.defined() && images.dtype() == DType::u8 && images.dim() == 4 && images.size(1) == 3,
             "normalize: expected u8 images (N, 3, H, W), got ",
             images.defined() ? detail::str_cat(images.dtype(), " ", images.shape()) : std::string("undefined"));
  AugmentOptions o = AugmentOptions::eval().mean(mean).std(std);
  const int64_t h = images.size(2), w = images.size(3);
  check_options(o, h, w);
  Tensor src = images.to(Device::cpu()).contiguous();
  Tensor out = empty(images.shape(), DType::f32);
  for (int64_t i = 0; i < images.size(0); ++i)
    augment_image(src.data<uint8_t>() + i * 3 * h * w, out.data<float>() + i * 3 * h * w, h, w, AugmentDraw{}, o);
  return out;
}

Tensor augment_gather(const Cifar10Dataset& data, std::span<const int64_t> indices, int64_t epoch, int64_t rank,
                      const AugmentOptions& options) {
  KILN_CHECK(data.images.defined() && data.images.dtype() == DType::u8 && data.images.dim() == 4 &&
                 data.images.size(1) == 3 && data.images.is_contiguous(),
             "augment_gather: expected contiguous u8 images (N, 3, H, W)");
  const int64_t h = data.images.size(2), w = data.images.size(3), n = data.images.size(0);
  check_options(options, h, w);
  const int64_t image = 3 * h * w;
  Tensor out = empty({static_cast<int64_t>(indices.size()), 3, h, w}, DType::f32);
  const uint8_t* src = data.images.data<uint8_t>();
  float* dst = out.data<float>();
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t k = indices[i];
    KILN_CHECK(k >= 0 && k < n, "augment_gather: index ", k, " (batch position ", i, ") is outside a dataset of ", n);
    augment_image(src + k * image, dst + static_cast<int64_t>(i) * image, h, w, augment_draw(options, epoch, rank, k),
                  options);
  }
  return out;
}

}  // namespace kiln::data
