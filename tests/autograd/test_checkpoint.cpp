// Activation checkpointing: the same gradients as the plain graph (bitwise on the CPU), dropout
// masks replayed, parameters' hooks fired once, less memory held between forward and backward,
// multiple inputs/outputs, grad mode off, autocast replayed, and errors.
#include "test_util.h"

#include <kiln/autograd/checkpoint.h>
#include <kiln/core/cpu_allocator.h>

using namespace kiln;

namespace {

struct Weights {
  Tensor w1, w2;
  Weights() : w1(test::grad_leaf({16, 64}, 11, -0.3, 0.3, DType::f32)), w2(test::grad_leaf({64, 16}, 12, -0.3, 0.3, DType::f32)) {}
  void zero() {
    autograd::zero_grad({w1, w2});
  }
};

// A residual MLP piece with dropout drawn from `gen`.
Tensor piece(const Tensor& x, const Weights& w, Generator& gen) {
  Tensor h = dropout(gelu(matmul(x, w.w1), GeluApproximate::tanh), 0.25, true, gen);
  return x + matmul(h, w.w2);
}

}  // namespace

TEST_CASE("checkpointed pieces give bitwise the plain graph's gradients, dropout masks included") {
  Weights w;
  const Tensor x0 = test::grad_leaf({8, 16}, 3, -1.0, 1.0, DType::f32);
  std::vector<double> plain_loss, ckpt_loss;
  std::vector<std::vector<double>> plain, ckpt;
  uint64_t plain_offset = 0, ckpt_offset = 0;
  for (bool use_ckpt : {false, true}) {
    w.zero();
    autograd::zero_grad({x0});
    Generator gen(99);
    Tensor x = x0 * 1.0;
    for (int layer = 0; layer < 3; ++layer) {
      if (use_ckpt) x = autograd::checkpoint([&w, &gen](const Tensor& in) { return piece(in, w, gen); }, x, {&gen});
      else x = piece(x, w, gen);
    }
    Tensor loss = sum(x * x);
    loss.backward();
    REQUIRE(x0.grad().defined());
    (use_ckpt ? ckpt_loss : plain_loss) = test::values(loss);
    std::vector<std::vector<double>>& grads = use_ckpt ? ckpt : plain;
    for (const Tensor& t : {x0, w.w1, w.w2}) grads.push_back(test::values(t.grad()));
    (use_ckpt ? ckpt_offset : plain_offset) = gen.offset();
  }
  CHECK(ckpt_loss == plain_loss);
  CHECK(ckpt == plain);
  // The replay rewound the generator and put it back: the next draw is where it would have been.
  CHECK(ckpt_offset == plain_offset);
  CHECK(plain_offset > 0);
}

TEST_CASE("without rewinding the generator the replay draws other masks (the test can see it)") {
  Weights w;
  const Tensor x0 = test::grad_leaf({8, 16}, 3, -1.0, 1.0, DType::f32);
  std::vector<std::vector<double>> grads;
  for (bool rewind : {true, false}) {
    w.zero();
    Generator gen(99);
    Tensor x = autograd::checkpoint([&w, &gen](const Tensor& in) { return piece(in, w, gen); }, x0 * 1.0,
                                    rewind ? std::vector<Generator*>{&gen} : std::vector<Generator*>{});
    sum(x * x).backward();
    grads.push_back(test::values(w.w1.grad()));
  }
  CHECK(grads[0] != grads[1]);
}

TEST_CASE("parameters inside a checkpoint fire their post-accumulate hooks once per backward") {
  Weights w;
  int fired1 = 0, fired2 = 0;
  autograd::register_post_accumulate_grad_hook(w.w1, [&](const Tensor&) { ++fired1; });
  autograd::register_post_accumulate_grad_hook(w.w2, [&](const Tensor&) { ++fired2; });
  Generator gen(1);
  // The input needs no gradient: the parameters inside still get theirs.
  const Tensor x0 = test::random({4, 16}, DType::f32, 5);
  Tensor y = autograd::checkpoint([&w, &gen](const Tensor& in) { return piece(in, w, gen); }, x0, {&gen});
  CHECK(y.requires_grad());
  sum(y).backward();
  CHECK(fired1 == 1);
  CHECK(fired2 == 1);
  CHECK(w.w1.grad().defined());
}

TEST_CASE("a checkpointed chain holds far less memory between forward and backward") {
  set_cpu_cache_limit(0);  // live bytes only
  Tensor w = test::grad_leaf({256, 256}, 7, -0.05, 0.05, DType::f32);
  auto block = [&w](const Tensor& in) {
    Tensor h = in;
    for (int i = 0; i < 4; ++i) h = tanh(matmul(h, w));  // four (512, 256) activations saved
    return h;
  };
  const Tensor x0 = test::random({512, 256}, DType::f32, 8);
  size_t held[2] = {0, 0};
  for (bool use_ckpt : {false, true}) {
    const size_t before = cpu_allocator_stats().allocated_bytes;
    Tensor x = x0;
    for (int layer = 0; layer < 6; ++layer) x = use_ckpt ? autograd::checkpoint(block, x) : block(x);
    held[use_ckpt] = cpu_allocator_stats().allocated_bytes - before;
    sum(x).backward();
    autograd::zero_grad({w});
  }
  const size_t act = 512 * 256 * 4;
  INFO("plain holds ", held[0], " bytes, checkpointed ", held[1]);
  CHECK(held[0] >= 6 * 4 * act);  // every tanh output (and matmul output) saved
  CHECK(held[1] <= 7 * act);      // each block's input (and the output)
  set_cpu_cache_limit(size_t(2048) << 20);
}

TEST_CASE("several inputs and outputs; an output the loss does not use; grad mode off") {
  Tensor a = test::grad_leaf({3, 4}, 1, DType::f64), b = test::grad_leaf({3, 4}, 2, DType::f64);
  autograd::CheckpointFn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0] * in[1], exp(in[0]), in[1] * 2.0};
  };
  std::vector<Tensor> out = autograd::checkpoint(fn, {a, b});
  REQUIRE(out.size() == 3);
  sum(out[0] + out[1]).backward();  // out[2] unused
  Tensor a2 = a.detach(), b2 = b.detach();
  test::check_close(a.grad(), test::values(b2 + exp(a2)), 1e-15, 0, "d/da");
  test::check_close(b.grad(), test::values(a2), 1e-15, 0, "d/db");

  NoGradGuard no_grad;
  std::vector<Tensor> plain = autograd::checkpoint(fn, {a, b});
  CHECK_FALSE(plain[0].requires_grad());
}

TEST_CASE("the replay runs under the forward's autocast state") {
  Tensor w1 = test::grad_leaf({16, 32}, 21, -0.5, 0.5, DType::f32);
  const Tensor x0 = test::random({8, 16}, DType::f32, 22);
  auto fn = [&w1](const Tensor& in) { return matmul(in, w1); };
  std::vector<std::vector<double>> grads;
  for (bool use_ckpt : {false, true}) {
    autograd::zero_grad({w1});
    Tensor y;
    {
      AutocastGuard autocast(DType::bf16);
      y = use_ckpt ? autograd::checkpoint(fn, x0) : fn(x0);
      CHECK(y.dtype() == DType::bf16);
    }
    // Backward outside the guard, as with torch.autocast: the replay must still use bf16.
    sum(y.to(DType::f32) * 1.5).backward();
    CHECK(w1.grad().dtype() == DType::f32);
    grads.push_back(test::values(w1.grad()));
  }
  CHECK(grads[0] == grads[1]);
}

TEST_CASE("errors: an empty function, a null generator") {
  Tensor x = test::grad_leaf({2}, 1, DType::f64);
  CHECK_THROWS_WITH_AS(autograd::checkpoint(std::function<Tensor(const Tensor&)>(), x), doctest::Contains("empty"),
                       Error);
  CHECK_THROWS_WITH_AS(
      autograd::checkpoint([](const Tensor& in) { return in * 2.0; }, x, {nullptr}), doctest::Contains("null generator"),
      Error);
}
