// CIFAR augmentation: the crop moves content by at most 4 pixels (reflect padding), the flip is
// a mirror, draws are reproducible from (seed, epoch, rank, index) and differ across epochs and
// ranks, and normalization gives (x / 255 - mean) / std.
#include "test_util.h"

#include <set>

#include <kiln/data/augment.h>

using namespace kiln;
using namespace kiln::data;

namespace {

// Image with distinct values: pixel (c, y, x) = (c * 80 + y * 7 + x * 3) % 256.
Cifar10Dataset ramp_images(int64_t n) {
  Cifar10Dataset d{empty({n, 3, 32, 32}, DType::u8), zeros({n}, DType::i64)};
  uint8_t* p = d.images.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 32; ++y)
        for (int64_t x = 0; x < 32; ++x) p[((i * 3 + c) * 32 + y) * 32 + x] = (c * 80 + y * 7 + x * 3 + i) % 256;
  return d;
}

// Un-normalizes f32 back to the u8 grey level (rounded).
int level(float v, int c) { return static_cast<int>(std::lround((v * kCifarStd[c] + kCifarMean[c]) * 255.0f)); }

}  // namespace

TEST_CASE("normalization gives (x / 255 - mean) / std per channel") {
  Tensor img = zeros({1, 3, 32, 32}, DType::u8);
  img.select(1, 1).fill_(255);
  img.select(1, 2).fill_(51);
  Tensor out = normalize(img);
  CHECK(out.dtype() == DType::f32);
  auto v = out.to_vector<float>();
  CHECK(v[0] == doctest::Approx(-0.4914 / 0.2470).epsilon(1e-6));
  CHECK(v[1024] == doctest::Approx((1.0 - 0.4822) / 0.2435).epsilon(1e-6));
  CHECK(v[2048 + 500] == doctest::Approx((0.2 - 0.4465) / 0.2616).epsilon(1e-6));
  CHECK_ERROR_CONTAINS(normalize(zeros({1, 3, 4, 4})), "u8", "f32");
}

TEST_CASE("crop shifts content by the drawn offset within 4 pixels (reflect at the border)") {
  Cifar10Dataset d = ramp_images(1);
  const uint8_t* src = d.images.data<uint8_t>();
  std::vector<float> out(3072);
  for (int64_t dy : {0, 3, 4, 8}) {
    for (int64_t dx : {0, 1, 4, 8}) {
      CAPTURE(dy);
      CAPTURE(dx);
      augment_image(src, out.data(), 32, 32, AugmentDraw{dy, dx, false}, AugmentOptions());
      for (int c = 0; c < 3; ++c) {
        for (int64_t y = 0; y < 32; ++y) {
          for (int64_t x = 0; x < 32; ++x) {
            int64_t sy = y + dy - 4, sx = x + dx - 4;
            sy = sy < 0 ? -sy : (sy > 31 ? 62 - sy : sy);  // reflect
            sx = sx < 0 ? -sx : (sx > 31 ? 62 - sx : sx);
            if (level(out[(c * 32 + y) * 32 + x], c) != src[(c * 32 + sy) * 32 + sx]) {
              FAIL_CHECK("pixel (", c, ", ", y, ", ", x, ") is not source (", sy, ", ", sx, ")");
              return;
            }
          }
        }
      }
    }
  }
  CHECK_ERROR_CONTAINS(augment_image(src, out.data(), 32, 32, AugmentDraw{9, 0, false}, AugmentOptions()),
                       "offset (9, 0)", "[0, 8]");
}

TEST_CASE("flip mirrors the cropped image") {
  Cifar10Dataset d = ramp_images(1);
  std::vector<float> plain(3072), flipped(3072);
  augment_image(d.images.data<uint8_t>(), plain.data(), 32, 32, AugmentDraw{2, 6, false}, AugmentOptions());
  augment_image(d.images.data<uint8_t>(), flipped.data(), 32, 32, AugmentDraw{2, 6, true}, AugmentOptions());
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x) REQUIRE(flipped[(c * 32 + y) * 32 + x] == plain[(c * 32 + y) * 32 + 31 - x]);
  CHECK(flipped != plain);
}

TEST_CASE("draws are reproducible, cover the range, and differ across epochs, ranks and seeds") {
  AugmentOptions o = AugmentOptions().seed(9);
  std::set<int64_t> dys;
  int flips = 0, same_epoch = 0, same_rank = 0, same_seed = 0;
  for (int64_t i = 0; i < 400; ++i) {
    AugmentDraw a = augment_draw(o, 3, 1, i), b = augment_draw(o, 3, 1, i);
    CHECK((a.dy == b.dy && a.dx == b.dx && a.flip == b.flip));
    CHECK((a.dy >= 0 && a.dy <= 8 && a.dx >= 0 && a.dx <= 8));
    dys.insert(a.dy);
    flips += a.flip;
    auto same = [&](const AugmentDraw& c) { return c.dy == a.dy && c.dx == a.dx && c.flip == a.flip; };
    same_epoch += same(augment_draw(o, 4, 1, i));
    same_rank += same(augment_draw(o, 3, 0, i));
    same_seed += same(augment_draw(AugmentOptions().seed(10), 3, 1, i));
  }
  CHECK(dys.size() == 9u);
  CHECK((flips > 150 && flips < 250));
  // Independent draws agree with probability 1/162; allow a few coincidences.
  CHECK(same_epoch < 12);
  CHECK(same_rank < 12);
  CHECK(same_seed < 12);
  AugmentDraw none = augment_draw(AugmentOptions::eval(), 0, 0, 5);
  CHECK((none.dy == 0 && none.dx == 0 && !none.flip));
}

TEST_CASE("augment_gather: each sample gets its own index's draw, independent of batch position") {
  Cifar10Dataset d = ramp_images(6);
  AugmentOptions o = AugmentOptions().seed(1);
  std::vector<int64_t> idx{4, 0, 5};
  Tensor batch = augment_gather(d, idx, 2, 0, o);
  CHECK(batch.shape() == Shape{3, 3, 32, 32});
  std::vector<int64_t> single{5};
  Tensor alone = augment_gather(d, single, 2, 0, o);
  CHECK(batch.select(0, 2).contiguous().to_vector<float>() == alone.select(0, 0).contiguous().to_vector<float>());
  std::vector<float> manual(3072);
  augment_image(d.images.data<uint8_t>() + 4 * 3072, manual.data(), 32, 32, augment_draw(o, 2, 0, 4), o);
  CHECK(batch.select(0, 0).contiguous().to_vector<float>() == manual);
  Tensor other_epoch = augment_gather(d, idx, 3, 0, o);
  CHECK(other_epoch.to_vector<float>() != batch.to_vector<float>());
  std::vector<int64_t> bad{6};
  CHECK_ERROR_CONTAINS(augment_gather(d, bad, 0, 0, o), "index 6", "dataset of 6");
}
