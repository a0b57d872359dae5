// gelu_linear against its composition linear(gelu(h), w, b): bitwise equal outputs and gradients
// (f64, f32, bf16 autocast, both GELU forms, with and without bias), and it holds less memory
// between forward and backward (gelu(h) is not kept).
#include "test_util.h"

#include <kiln/core/memory_stats.h>

using namespace kiln;

namespace {

struct Result {
  std::vector<double> out, dh, dw, db;
};

Result run(bool fused, DType dtype, bool autocast, GeluApproximate approximate, bool bias) {
  Tensor h = test::grad_leaf({3, 5, 16}, 1, dtype);
  Tensor w = test::grad_leaf({8, 16}, 2, -0.5, 0.5, dtype);
  Tensor b = bias ? test::grad_leaf({8}, 3, dtype) : Tensor();
  Tensor y;
  {
    AutocastGuard guard(DType::bf16, autocast);
    Tensor hh = h * 1.0;  // a non-leaf input, as c_fc's output is
    y = fused ? gelu_linear(hh, w, b, approximate) : linear(gelu(hh, approximate), w, b);
  }
  Tensor g = test::random(y.shape(), y.dtype(), 4);
  y.backward(g);
  return {test::values(y.detach()), test::values(h.grad()), test::values(w.grad()),
          bias ? test::values(b.grad()) : std::vector<double>{}};
}

}  // namespace

TEST_CASE("gelu_linear is bitwise linear(gelu(h)) in value and gradients") {
  struct Case {
    DType dtype;
    bool autocast;
  };
  for (Case c : {Case{DType::f64, false}, Case{DType::f32, false}, Case{DType::f32, true}})
    for (GeluApproximate approximate : {GeluApproximate::tanh, GeluApproximate::none})
      for (bool bias : {true, false}) {
        INFO("dtype ", c.dtype, ", autocast ", c.autocast, ", tanh ", approximate == GeluApproximate::tanh,
             ", bias ", bias);
        const Result ref = run(false, c.dtype, c.autocast, approximate, bias);
        const Result r = run(true, c.dtype, c.autocast, approximate, bias);
        CHECK(r.out == ref.out);
        CHECK(r.dh == ref.dh);
        CHECK(r.dw == ref.dw);
        CHECK(r.db == ref.db);
      }
}

TEST_CASE("gelu_linear keeps h only: less memory held between forward and backward") {
  Tensor w = test::grad_leaf({64, 256}, 2, -0.1, 0.1, DType::f32);
  Tensor x = test::grad_leaf({64, 64}, 5, DType::f32);
  Tensor w_fc = test::grad_leaf({256, 64}, 6, -0.1, 0.1, DType::f32);
  int64_t held[2];
  for (bool fused : {false, true}) {
    const int64_t before = memory_allocated();
    Tensor h = linear(x, w_fc);  // (64, 256)
    Tensor y = fused ? gelu_linear(h, w) : linear(gelu(h, GeluApproximate::tanh), w);
    h = Tensor();
    held[fused] = memory_allocated() - before;
    sum(y).backward();
  }
  INFO("unfused ", held[0], " B, fused ", held[1], " B");
  CHECK(held[0] - held[1] >= int64_t(64 * 256 * 4));  // gelu(h), 64 x 256 f32, is not kept
}
