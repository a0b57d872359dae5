// GPT with activation checkpointing (GPT::set_recompute, per block or per half): the same loss and
// gradients as without it (bitwise on the CPU, with dropout and under bf16 autocast), fewer bytes
// held between forward and backward, and a few AdamW steps that stay identical.
#include "test_util.h"

#include <map>

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

Run train(models::GPTRecompute recompute, double dropout, bool bf16, int steps) {
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
  Run plain = train(models::GPTRecompute::none, 0.1, false, 3), ckpt = train(models::GPTRecompute::block, 0.1, false, 3);
  CHECK(ckpt.losses == plain.losses);
  REQUIRE(ckpt.grads.size() == plain.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) CHECK(ckpt.grads[i] == plain.grads[i]);
  CHECK(ckpt.params == plain.params);
  // Dropout really is on: without it the losses differ.
  CHECK(train(models::GPTRecompute::none, 0.0, false, 1).losses[0] != plain.losses[0]);
}

TEST_CASE("recomputing only attention or only the MLP gives bitwise the plain run's numbers (dropout 0.1, and bf16)") {
  for (models::GPTRecompute mode : {models::GPTRecompute::attention, models::GPTRecompute::mlp}) {
    INFO("mode ", models::gpt_recompute_name(mode));
    Run plain = train(models::GPTRecompute::none, 0.1, false, 2), ckpt = train(mode, 0.1, false, 2);
    CHECK(ckpt.losses == plain.losses);
    REQUIRE(ckpt.grads.size() == plain.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i) CHECK(ckpt.grads[i] == plain.grads[i]);
    CHECK(ckpt.params == plain.params);
    Run plain16 = train(models::GPTRecompute::none, 0.0, true, 1), ckpt16 = train(mode, 0.0, true, 1);
    CHECK(ckpt16.losses == plain16.losses);
    for (size_t i = 0; i < plain16.grads.size(); ++i) CHECK(ckpt16.grads[i] == plain16.grads[i]);
  }
}

TEST_CASE("recompute modes parse by name and order by memory held: none > attention, mlp > block") {
  CHECK(models::parse_gpt_recompute("attn") == models::GPTRecompute::attention);
  CHECK(models::parse_gpt_recompute("on") == models::GPTRecompute::block);
  CHECK(models::parse_gpt_recompute("off") == models::GPTRecompute::none);
  CHECK_THROWS_WITH_AS(models::parse_gpt_recompute("half"), doctest::Contains("none, block, attention, mlp"),
                       Error);
  GPTConfig c = config(0.0);
  c.n_layer = 4;
  GPT model(c);
  Tensor x = tokens({4, 32}, 3), y = tokens({4, 32}, 4);
  std::map<models::GPTRecompute, size_t> held;
  for (models::GPTRecompute mode : {models::GPTRecompute::none, models::GPTRecompute::attention,
                                    models::GPTRecompute::mlp, models::GPTRecompute::block}) {
    model.set_recompute(mode);
    CHECK(model.recompute_mode() == mode);
    const size_t before = cpu_allocator_stats().allocated_bytes;
    Tensor loss = model.loss(x, y);
    held[mode] = cpu_allocator_stats().allocated_bytes - before;
    loss.backward();
    model.zero_grad();
  }
  INFO("none ", held[models::GPTRecompute::none], ", attention ", held[models::GPTRecompute::attention], ", mlp ",
       held[models::GPTRecompute::mlp], ", block ", held[models::GPTRecompute::block]);
  CHECK(held[models::GPTRecompute::attention] < held[models::GPTRecompute::none]);
  CHECK(held[models::GPTRecompute::mlp] < held[models::GPTRecompute::none]);
  CHECK(held[models::GPTRecompute::block] < held[models::GPTRecompute::attention]);
  CHECK(held[models::GPTRecompute::block] < held[models::GPTRecompute::mlp]);
}

TEST_CASE("recompute under bf16 autocast matches the plain bf16 run") {
  Run plain = train(models::GPTRecompute::none, 0.0, true, 2), ckpt = train(models::GPTRecompute::block, 0.0, true, 2);
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
