// linear_gelu_linear against its composition linear(gelu(linear(x, w1, b1)), w2, b2) on the CPU:
// bitwise equal outputs and every gradient (f64, f32, bf16 autocast, with and without biases), a
// float64 finite-difference check, the GELU output not kept between forward and backward, a clear
// error for mismatched widths, and GPT with the switch on (fused_gelu_epilogue) bitwise as with it
// off. The CUDA epilogue path: test_cuda_linear_gelu_linear.cpp.
#include "test_util.h"

#include <kiln/autograd/gradcheck.h>
#include <kiln/core/memory_stats.h>

using namespace kiln;

namespace {

struct Result {
  std::vector<double> out, dx, dw1, db1, dw2, db2;
};

Result run(bool fused, DType dtype, bool autocast, bool bias) {
  Tensor x = test::grad_leaf({3, 5, 16}, 1, dtype);
  Tensor w1 = test::grad_leaf({32, 16}, 2, -0.5, 0.5, dtype);
  Tensor b1 = bias ? test::grad_leaf({32}, 3, dtype) : Tensor();
  Tensor w2 = test::grad_leaf({8, 32}, 4, -0.5, 0.5, dtype);
  Tensor b2 = bias ? test::grad_leaf({8}, 5, dtype) : Tensor();
  Tensor y;
  {
    AutocastGuard guard(DType::bf16, autocast);
    Tensor xx = x * 1.0;  // a non-leaf input, as ln_2's output is
    y = fused ? linear_gelu_linear(xx, w1, b1, w2, b2)
              : gelu_linear(linear(xx, w1, b1), w2, b2, GeluApproximate::tanh);
  }
  Tensor g = test::random(y.shape(), y.dtype(), 6);
  y.backward(g);
  auto grad = [](const Tensor& t) { return t.defined() ? test::values(t.grad()) : std::vector<double>{}; };
  return {test::values(y.detach()), grad(x), grad(w1), grad(b1), grad(w2), grad(b2)};
}

}  // namespace

TEST_CASE("linear_gelu_linear is bitwise the two linears and the GELU, in value and every gradient") {
  struct Case {
    DType dtype;
    bool autocast;
  };
  for (Case c : {Case{DType::f64, false}, Case{DType::f32, false}, Case{DType::f32, true}})
    for (bool bias : {true, false}) {
      INFO("dtype ", c.dtype, ", autocast ", c.autocast, ", bias ", bias);
      const Result ref = run(false, c.dtype, c.autocast, bias);
      const Result r = run(true, c.dtype, c.autocast, bias);
      CHECK(r.out == ref.out);
      CHECK(r.dx == ref.dx);
      CHECK(r.dw1 == ref.dw1);
      CHECK(r.db1 == ref.db1);
      CHECK(r.dw2 == ref.dw2);
      CHECK(r.db2 == ref.db2);
    }
}

TEST_CASE("linear_gelu_linear passes a float64 finite-difference check") {
  Tensor x = test::grad_leaf({2, 3, 4}, 11, DType::f64);
  Tensor w1 = test::grad_leaf({6, 4}, 12, -0.5, 0.5, DType::f64);
  Tensor b1 = test::grad_leaf({6}, 13, DType::f64);
  Tensor w2 = test::grad_leaf({5, 6}, 14, -0.5, 0.5, DType::f64);
  Tensor b2 = test::grad_leaf({5}, 15, DType::f64);
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return linear_gelu_linear(in[0], in[1], in[2], in[3], in[4]); },
                  {x, w1, b1, w2, b2}));
}

TEST_CASE("linear_gelu_linear keeps x and the pre-activation, not the GELU's output") {
  Tensor x = test::grad_leaf({64, 64}, 5, DType::f32);
  Tensor w1 = test::grad_leaf({256, 64}, 6, -0.1, 0.1, DType::f32);
  Tensor w2 = test::grad_leaf({64, 256}, 2, -0.1, 0.1, DType::f32);
  int64_t held[2];
  for (bool fused : {false, true}) {
    const int64_t before = memory_allocated();
    Tensor y = fused ? linear_gelu_linear(x, w1, Tensor(), w2) : linear(gelu(linear(x, w1), GeluApproximate::tanh), w2);
    held[fused] = memory_allocated() - before;
    sum(y).backward();
  }
  INFO("composition ", held[0], " B, fused ", held[1], " B");
  CHECK(held[0] - held[1] >= int64_t(64 * 256 * 4));  // gelu(pre), 64 x 256 f32, is not kept
}

TEST_CASE("linear_gelu_linear names mismatched widths") {
  Tensor x = test::random({2, 4});
  CHECK_THROWS_WITH_AS(linear_gelu_linear(x, test::random({6, 4}), Tensor(), test::random({5, 7})),
                       doctest::Contains("does not take the hidden width 6"), Error);
}

TEST_CASE("GPT with the fused MLP switched on: bitwise the same loss and gradients on the CPU") {
  models::GPTConfig c = models::gpt_config("gpt-tiny");
  c.n_layer = 2;
  Generator g(3);
  Tensor idx = randint(0, c.vocab_size, {2, 32}, g), tgt = randint(0, c.vocab_size, {2, 32}, g);
  const bool before = fused_gelu_epilogue();
  std::vector<double> loss;
  std::vector<std::vector<double>> grads;
  for (bool fused : {false, true}) {
    set_fused_gelu_epilogue(fused);
    CHECK(fused_gelu_epilogue() == fused);
    models::GPT model(models::GPTOptions(c).seed(1));
    for (bool autocast : {false, true}) {
      model.zero_grad();
      Tensor l;
      {
        AutocastGuard guard(DType::bf16, autocast);
        l = model.loss(idx, tgt);
      }
      l.backward();
      loss.push_back(l.item());
      std::vector<double> all;
      for (const auto& [name, p] : model.named_parameters())
        for (double v : test::values(p.grad())) all.push_back(v);
      grads.push_back(all);
    }
  }
  set_fused_gelu_epilogue(before);
  CHECK(loss[2] == loss[0]);
  CHECK(loss[3] == loss[1]);
  CHECK(grads[2] == grads[0]);
  CHECK(grads[3] == grads[1]);
}
