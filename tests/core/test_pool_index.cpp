// The index math of the CUDA pooling kernels (core/kernels/pool_index.h) against brute force, on the
// CPU: the first tap of a padded dilated window, the output windows covering an input pixel (the
// gather that replaces the CPU's scatter in avg_pool2d_backward), the adaptive windows.
#include "test_util.h"

#include <kiln/core/kernels/pool_index.h>

using namespace kiln;
namespace pi = kiln::pool_index;

TEST_CASE("first_tap lands where the CPU kernel's while loop does") {
  for (int64_t dilation = 1; dilation <= 5; ++dilation)
    for (int64_t start = -23; start <= 23; ++start) {
      int64_t y = start;
      while (y < 0) y += dilation;
      CHECK_MESSAGE(pi::first_tap(start, dilation) == y, "start ", start, " dilation ", dilation);
    }
}

TEST_CASE("windows_covering is exactly the outputs whose window holds the input") {
  int checked = 0;
  for (int64_t kernel = 1; kernel <= 5; ++kernel)
    for (int64_t stride = 1; stride <= 4; ++stride)
      for (int64_t pad = 0; pad <= kernel; ++pad)  // wider than pooling allows: the math must not care
        for (int64_t in = 1; in <= 13; ++in) {
          if (in + 2 * pad < kernel) continue;
          const int64_t out = (in + 2 * pad - kernel) / stride + 1;
          for (int64_t i = 0; i < in; ++i) {
            std::vector<int64_t> covering;
            for (int64_t o = 0; o < out; ++o)
              if (o * stride - pad <= i && i < o * stride - pad + kernel) covering.push_back(o);
            const pi::Range r = pi::windows_covering(i, kernel, stride, pad, out);
            CAPTURE(kernel);
            CAPTURE(stride);
            CAPTURE(pad);
            CAPTURE(in);
            CAPTURE(i);
            REQUIRE(r.begin <= r.end);
            REQUIRE(r.end - r.begin == static_cast<int64_t>(covering.size()));
            for (int64_t o = r.begin; o < r.end; ++o) REQUIRE(covering[o - r.begin] == o);
            ++checked;
          }
        }
  CHECK(checked > 1000);
}

TEST_CASE("adaptive windows: start/end as the CPU kernel, covering exactly the outputs that read the input") {
  for (int64_t in = 1; in <= 17; ++in)
    for (int64_t out = 1; out <= 17; ++out) {
      CAPTURE(in);
      CAPTURE(out);
      for (int64_t o = 0; o < out; ++o) {
        // torch: [floor(o * in / out), ceil((o + 1) * in / out))
        REQUIRE(pi::adaptive_start(o, in, out) == static_cast<int64_t>(std::floor(double(o) * in / out)));
        REQUIRE(pi::adaptive_end(o, in, out) == static_cast<int64_t>(std::ceil(double(o + 1) * in / out)));
      }
      for (int64_t i = 0; i < in; ++i) {
        std::vector<int64_t> covering;
        for (int64_t o = 0; o < out; ++o)
          if (pi::adaptive_start(o, in, out) <= i && i < pi::adaptive_end(o, in, out)) covering.push_back(o);
        const pi::Range r = pi::adaptive_covering(i, in, out);
        CAPTURE(i);
        REQUIRE(!covering.empty());
        REQUIRE(r.begin == covering.front());
        REQUIRE(r.end == covering.back() + 1);
        REQUIRE(r.end - r.begin == static_cast<int64_t>(covering.size()));
      }
    }
}
