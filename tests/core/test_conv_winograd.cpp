// Kiln's Winograd F(2x2, 3x3) convolutions (core/cpu/conv_winograd.h, Note [CPU Winograd]) against
// the float64 im2col kernels and against the path they replace (oneDNN's, or Kiln's im2col in a
// build without oneDNN): forward and both backward passes on wide 3x3 layers with padding 0-2,
// odd and non-square planes, batches that leave a partial chunk, bias, bf16; layers it must not
// take (stride, dilation, groups, few channels) still go the old way; thread-count independence.
#include "test_util.h"

#include <kiln/core/cpu/conv_winograd.h>
#include <kiln/core/cpu/onednn/switch.h>
#include <kiln/core/parallel.h>

using namespace kiln;
using ops::Conv2dOptions;

namespace {

struct ConvCase {
  Shape x, w;
  Conv2dOptions opt;
  bool bias;
};

// The three results (forward, backward input, backward weight) of c in dtype dt with the Winograd
// variant on or off, inputs drawn from seeds 21-24 (f64: the exact reference).
std::vector<std::vector<double>> conv_results(const ConvCase& c, DType dt, bool winograd) {
  cpu::CpuWinogradGuard guard(winograd);
  Tensor x = test::random(c.x, dt, 21), w = test::random(c.w, dt, 22);
  Tensor b = c.bias ? test::random({c.w[0]}, dt, 23) : Tensor();
  Tensor y = ops::conv2d(x, w, b, c.opt);
  Tensor gy = test::random(y.shape(), dt, 24);
  return {test::values(y), test::values(ops::conv2d_backward_input(gy, w, x.shape(), c.opt)),
          test::values(ops::conv2d_backward_weight(gy, x, w.shape(), c.opt))};
}

const char* const kPass[] = {"forward", "backward input", "backward weight"};

}  // namespace

TEST_CASE("Winograd convolutions match the float64 kernels and the direct path on wide 3x3 layers") {
  const ConvCase cases[] = {
      {{2, 64, 8, 8}, {64, 64, 3, 3}, Conv2dOptions().padding(1), false},     // a CIFAR CNN layer's geometry
      {{3, 64, 7, 9}, {72, 64, 3, 3}, Conv2dOptions().padding(1), true},      // odd, non-square, bias
      {{2, 80, 6, 5}, {64, 80, 3, 3}, Conv2dOptions(), false},                // no padding: odd output
      {{1, 64, 5, 6}, {64, 64, 3, 3}, Conv2dOptions().padding({2, 1}), true}, // padding 2 and 1
      {{1, 64, 3, 3}, {96, 64, 3, 3}, Conv2dOptions().padding(1), false},     // one tile, partly outside
      {{30, 64, 6, 6}, {64, 64, 3, 3}, Conv2dOptions().padding(1), false},    // 28 images a chunk: 28+2
      {{40, 64, 8, 8}, {64, 64, 3, 3}, Conv2dOptions().padding(1), false},    // 16 images a chunk: 16+16+8
  };
  for (const ConvCase& c : cases) {
    const std::string what = detail::str_cat("x ", c.x, " w ", c.w);
    const auto exact = conv_results(c, DType::f64, true);  // f64 never takes the variant
    const int64_t before = cpu::cpu_winograd_calls();
    const auto wino = conv_results(c, DType::f32, true);
    CHECK_MESSAGE(cpu::cpu_winograd_calls() - before == 3, "the variant did not run all three passes for ", what);
    const auto direct = conv_results(c, DType::f32, false);
    for (int k = 0; k < 3; ++k) {
      // Inputs in [-2, 2): sums of 576-720 terms of magnitude up to 4 (the backward weight sums
      // over up to 40 images). Winograd's transforms add error in proportion to the layer's
      // magnitude, not to each output: measured up to 5.4e-7 of the largest |value| on these
      // shapes, the direct f32 path (oneDNN's, avx512 and avx2 sets) up to 2.3e-6.
      double scale = 0, err = 0, err_direct = 0;
      for (size_t i = 0; i < exact[k].size(); ++i) {
        scale = std::max(scale, std::fabs(exact[k][i]));
        err = std::max(err, std::fabs(wino[k][i] - exact[k][i]));
        err_direct = std::max(err_direct, std::fabs(direct[k][i] - exact[k][i]));
      }
      const std::string pass = kPass[k];
      CHECK_MESSAGE(err <= 2e-6 * scale, pass, " ", what, ": winograd error ", err, " at scale ", scale,
                    " (direct path ", err_direct, ")");
      test::check_close(wino[k], direct[k], 2e-5, 4e-6 * scale, detail::str_cat(kPass[k], " f32 vs direct ", what));
    }
    const auto wino16 = conv_results(c, DType::bf16, true), direct16 = conv_results(c, DType::bf16, false);
    for (int k = 0; k < 3; ++k)  // both in f32, rounded once: one bf16 ulp apart at most, near zero the layer's
      test::check_close(wino16[k], direct16[k], 1e-2, 2e-1, detail::str_cat(kPass[k], " bf16 vs direct ", what));
  }
}

TEST_CASE("Winograd leaves the layers it does not take to the direct path") {
  const ConvCase cases[] = {
      {{2, 64, 8, 8}, {64, 64, 3, 3}, Conv2dOptions().padding(1).stride(2), false},
      {{2, 64, 9, 9}, {64, 64, 3, 3}, Conv2dOptions().padding(2).dilation(2), false},
      {{2, 64, 8, 8}, {64, 32, 3, 3}, Conv2dOptions().padding(1).groups(2), false},
      {{2, 32, 8, 8}, {64, 32, 3, 3}, Conv2dOptions().padding(1), false},  // below kWinogradMinChannels
      {{2, 64, 8, 8}, {64, 64, 5, 5}, Conv2dOptions().padding(2), false},
      {{2, 64, 8, 8}, {64, 64, 3, 3}, Conv2dOptions().padding(3), false},
  };
  for (const ConvCase& c : cases) {
    const std::string what = detail::str_cat("x ", c.x, " w ", c.w);
    const int64_t before = cpu::cpu_winograd_calls();
    const auto on = conv_results(c, DType::f32, true);
    CHECK_MESSAGE(cpu::cpu_winograd_calls() == before, "the variant took ", what);
    const auto off = conv_results(c, DType::f32, false);
    for (int k = 0; k < 3; ++k) CHECK_MESSAGE(on[k] == off[k], std::string(kPass[k]), " ", what);
  }
}

TEST_CASE("Winograd results do not depend on the thread count") {
  const ConvCase c{{20, 64, 6, 6}, {64, 64, 3, 3}, Conv2dOptions().padding(1), true};
  const int saved = num_threads();
  std::vector<std::vector<double>> runs[2];
  for (int t = 0; t < 2; ++t) {
    set_num_threads(t == 0 ? 1 : std::max(2, saved));
    runs[t] = conv_results(c, DType::f32, true);
  }
  set_num_threads(saved);
  for (int k = 0; k < 3; ++k) CHECK_MESSAGE(runs[0][k] == runs[1][k], std::string(kPass[k]));
}

TEST_CASE("KILN_CPU_WINOGRAD's setter and guard") {
  const bool start = cpu::cpu_winograd_enabled();
  {
    cpu::CpuWinogradGuard on(true);
    CHECK(cpu::cpu_winograd_enabled());
    {
      cpu::CpuWinogradGuard off(false);
      CHECK_FALSE(cpu::cpu_winograd_enabled());
    }
    CHECK(cpu::cpu_winograd_enabled());
  }
  CHECK(cpu::cpu_winograd_enabled() == start);
}
