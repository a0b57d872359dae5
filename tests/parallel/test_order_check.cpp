// Note [Bucket order check] without processes: codes are digits that never wrap, so a rank 256
// iterations (or buckets, or collectives) away is told apart even in a bf16 bucket's tail.
#include <doctest/doctest.h>

#include <kiln/parallel/order_check.h>

#include "test_util.h"

using namespace kiln;
using namespace kiln::dist;

namespace {

// The tail every rank of a 2-rank group sees after the sum when rank 0 wrote (iteration0, bucket,
// seq0) and rank 1 (iteration1, bucket, seq1).
std::vector<double> summed(DType dtype, int64_t iteration0, uint64_t seq0, int64_t iteration1, uint64_t seq1) {
  OrderChecker r0(0, 2, OrderCheck::every_iteration), r1(1, 2, OrderCheck::every_iteration);
  r0.reset(4);
  r1.reset(4);
  std::vector<double> a(size_t(r0.slots(dtype)), 0.0), b(a.size(), 0.0);
  r0.write_codes(a, 3, iteration0, seq0, dtype);
  r1.write_codes(b, 3, iteration1, seq1, dtype);
  for (size_t k = 0; k < a.size(); ++k) a[k] += b[k];
  return a;
}

}  // namespace

TEST_CASE("order check codes: no wrap modulo the dtype's exact-integer range") {
  for (DType dtype : {DType::bf16, DType::f16, DType::f32, DType::f64}) {
    CAPTURE(dtype);
    OrderChecker r0(0, 2, OrderCheck::every_iteration);
    r0.reset(4);
    const double exact = dtype == DType::bf16 ? 256 : dtype == DType::f16 ? 2048 : dtype == DType::f32 ? 16777216 : 0;
    // Every slot is an integer the dtype holds exactly.
    std::vector<double> tail(size_t(r0.slots(dtype)), 0.0);
    r0.write_codes(tail, 3, (int64_t(1) << 40) + 12345, (uint64_t(1) << 43) + 999, dtype);
    for (double v : tail) {
      CHECK(v == std::floor(v));
      if (exact > 0) CHECK(v < exact);
    }
    // Same codes: no mismatch. Iteration or sequence number 256, 2048 or 2^24 apart: a mismatch
    // that names both values in full.
    r0.write_codes(tail, 3, 7, 40, dtype);  // what this rank (0) reduced as bucket 3
    CHECK(r0.mismatch(3, summed(dtype, 7, 40, 7, 40), 7).empty());
    for (int64_t apart : {int64_t(256), int64_t(2048), int64_t(1) << 24}) {
      CAPTURE(apart);
      std::string it = r0.mismatch(3, summed(dtype, 7, 40, 7 + apart, 40), 7);
      CHECK(it.find("of iteration " + std::to_string(7 + apart)) != std::string::npos);
      std::string seq = r0.mismatch(3, summed(dtype, 7, 40, 7, 40 + uint64_t(apart)), 7);
      CHECK(seq.find("sequence number " + std::to_string(40 + apart)) != std::string::npos);
    }
  }
}
