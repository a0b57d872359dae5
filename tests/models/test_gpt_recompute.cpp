// GPT with activation checkpointing (GPT::set_recompute): the same loss and gradients as without it
// (bitwise on the CPU, with dropout and under bf16 autocast), fewer bytes held between forward and
// backward, and a few AdamW steps that stay identical.
#include "test_util.h"

#include <kiln/core/cpu_allocator.h>

using namespace kiln;
using models::GPT;
using models::GPTConfig;

namespace {

GPTConfig config(double dropout) {
  GPTConfig c = models::gpt_config("gpt-tiny");
  c.n_layer = 3;
  c.n_embd = 64;
  c.block_size = 32;
  c.dropout = dropout;
  return c;
}

Tensor tokens(const Shape& shape, uint64_t seed) {
  return test::random(shape, DType::f64, seed, 0.0, 256.0).to(DType::i64);
}

struct Run {
  std::vector<double> losses;
  std::vector<std::vector<double>> grads;  // after the first step's backward
  std::vector<double> params;              // after the last step
};

Run train(bool recompute, double dropout, bool bf16, int steps) {
  GPT model(models::GPTOptions(config(dropout)).seed(5).recompute(recompute));
  model.train();
  optim::AdamW opt(model.parameters(), optim::AdamWOptions(1e-3).weight_decay(0.1));
  Tensor x = tokens({2, 32}, 1), y = tokens({2, 32}, 2);
  Run r;
  for (int s = 0; s < steps; ++s) {
    Tensor loss;
    {
      AutocastGuard autocast(DType::bf16, bf16);
      loss = model.loss(x, y);
    }
    loss.backward();
    r.losses.push_back(loss.item());
    if (s == 0)
      for (const Tensor& p : model.parameters()) r.grads.push_back(test::values(p.grad()));
    opt.step();
    opt.zero_grad();
  }
  for (const Tensor& p : model.parameters()) {
    auto v = test::values(p);
    r.params.insert(r.params.end(), v.begin(), v.end());
  }
  return r;
}

}  // namespace

TEST_CASE("recompute gives bitwise the same losses, gradients and parameters (f32, dropout 0.1)") {
  Run plain = train(false, 0.1, false, 3), ckpt = train(true, 0.1, false, 3);
  CHECK(ckpt.losses == plain.losses);
  REQUIRE(ckpt.grads.size() == plain.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) CHECK(ckpt.grads[i] == plain.grads[i]);
  CHECK(ckpt.params == plain.params);
  // Dropout really is on: without it the losses differ.
  CHECK(train(false, 0.0, false, 1).losses[0] != plain.losses[0]);
}

TEST_CASE("recompute under bf16 autocast matches the plain bf16 run") {
  Run plain = train(false, 0.0, true, 2), ckpt = train(true, 0.0, true, 2);
  CHECK(ckpt.losses == plain.losses);
  for (size_t i = 0; i < plain.grads.size(); ++i) CHECK(ckpt.grads[i] == plain.grads[i]);
}

TEST_CASE("recompute holds less memory between forward and backward; eval and no-grad are unaffected") {
  GPTConfig c = config(0.0);
  c.n_layer = 4;
  GPT model(c);
  Tensor x = tokens({4, 32}, 3), y = tokens({4, 32}, 4);
  size_t held[2];
  for (bool on : {false, true}) {
    model.set_recompute(on);
    CHECK(model.recompute() == on);
    const size_t before = cpu_allocator_stats().allocated_bytes;
    Tensor loss = model.loss(x, y);
    held[on] = cpu_allocator_stats().allocated_bytes - before;
    loss.backward();
    model.zero_grad();
  }
  INFO("plain ", held[0], " bytes, recompute ", held[1]);
  CHECK(held[1] * 2 < held[0]);
  NoGradGuard no_grad;
  model.set_recompute(true);
  CHECK_FALSE(model.loss(x, y).requires_grad());
}
