// Parity with torch 1.13's own PowerSGD hook (gen_powersgd.py runs powerSGD_hook on one Gloo rank):
// the same bucket of gradients, the same initial Q (warm start), ranks 1 and 2 (Gram-Schmidt) and
// 3 and 16 (QR; 16 is full rank, and one iteration's matrices are rank deficient), with error
// feedback; Kiln's bucket after the hook and its error feedback must match torch's every iteration.
#include <kiln/parallel/powersgd_hook.h>

#include "parallel/run_ranks.h"
#include "parity_util.h"

using namespace kiln;
using namespace kiln::dist;

namespace {
double norm(const Tensor& t) {
  double s = 0;
  for (double v : test::values(t)) s += v * v;
  return std::sqrt(s);
}
}  // namespace

TEST_CASE("PowerSGD = torch's powerSGD_hook: warm start, error feedback, Gram-Schmidt and QR") {
  const SafetensorsFile f = test::load_oracle("parity_powersgd.safetensors");
  test::run_ranks(1, [&](ProcessGroup& pg) {
    GradBucket bucket;
    bucket.index = 0;
    bucket.is_last = true;
    int64_t at = 0;
    for (int k = 0; f.contains("shape." + std::to_string(k)); ++k) {
      Shape dims;
      for (double d : test::values(f.at("shape." + std::to_string(k)))) dims.push_back(int64_t(d));
      bucket.parameters.push_back(empty(dims, DType::f64));
      bucket.offsets.push_back(at);
      at += bucket.parameters.back().numel();
    }
    REQUIRE(bucket.parameters.size() == 4);
    int compared = 0;
    for (int r : {1, 2, 3, 16}) {
      CAPTURE(r);
      const std::string tag = ".r" + std::to_string(r) + ".";
      auto state = std::make_shared<PowerSGDState>(
          PowerSGDOptions().matrix_approximation_rank(r).start_powerSGD_iter(2).min_compression_rate(1));
      for (int it = 0; f.contains("grad." + std::to_string(it)); ++it) {
        CAPTURE(it);
        if (it == 2) state->set_q(0, f.at("q0.r" + std::to_string(r)));
        bucket.buffer = f.at("grad." + std::to_string(it)).clone();
        powersgd_hook(*state, pg, bucket)->wait();
        test::check_rel(bucket.buffer, f.at("out" + tag + std::to_string(it)), 1e-10, "bucket after the hook");
        if (it >= 2) {  // relative to the gradient: at full rank the error is rounding noise on both sides
          const Tensor want = f.at("error" + tag + std::to_string(it));
          const double e = norm(ops::sub(state->error(0), want)), g = norm(f.at("grad." + std::to_string(it)));
          CHECK_MESSAGE(e <= 1e-10 * g, "error feedback differs by ", e, " (gradient norm ", g, ")");
        }
        ++compared;
      }
    }
    CHECK(compared == 28);
  });
}
