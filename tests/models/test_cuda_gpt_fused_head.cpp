// GPT's chunked LM head (Note [Chunked LM head], --fused-head on) on CUDA, which has not run on a
// GPU yet: the loss and every gradient equal the whole-logits head's, in f32 and under bf16
// autocast, and the device memory held after the forward is smaller. Skipped (exit 77) without a
// usable device.
#include "test_util.h"

#include <algorithm>
#include <cmath>

#include <kiln/cuda.h>

using namespace kiln;
using models::GPT;
using models::GPTConfig;

namespace {

struct Run {
  double loss = 0;
  std::vector<std::vector<double>> grads;
  int64_t held = 0;  // device bytes allocated by the forward and kept for the backward
};

Run run(models::GPTFusedHead mode, bool autocast) {
  GPTConfig c = models::gpt_config("gpt-tiny");
  c.n_layer = 2;
  c.n_embd = 128;
  c.n_head = 2;
  c.block_size = 128;
  c.vocab_size = 5000;
  c.padded_vocab_size = 5120;
  Generator g(11);
  Tensor x = randint(0, c.vocab_size, {4, 128}, g).to(Device::cuda());
  Tensor y = randint(0, c.vocab_size, {4, 128}, g).to(Device::cuda());
  GPT model(models::GPTOptions(c).seed(9).fused_head(mode));
  model.to(Device::cuda());
  cuda::synchronize();
  Run r;
  const int64_t base = cuda::memory_stats().allocated_bytes;
  Tensor loss;
  {
    AutocastGuard guard(DType::bf16, autocast);
    loss = model.loss(x, y);
  }
  r.held = cuda::memory_stats().allocated_bytes - base;
  loss.backward();
  r.loss = loss.item();
  for (const Tensor& p : model.parameters()) r.grads.push_back(test::values(p.grad().to(Device::cpu())));
  return r;
}

}  // namespace

TEST_CASE("CUDA: the chunked LM head gives the whole-logits loss and gradients, holding less") {
  test::require_cuda();
  for (bool autocast : {false, true}) {
    INFO((autocast ? "bf16 autocast" : "f32"));
    const Run whole = run(models::GPTFusedHead::off, autocast), chunked = run(models::GPTFusedHead::on, autocast);
    // f32: the same sums in other chunkings (TF32 is off); bf16: the logits' rounding differs.
    const double tol = autocast ? 2e-2 : 1e-5;
    CHECK(chunked.loss == doctest::Approx(whole.loss).epsilon(autocast ? 5e-3 : 1e-6));
    REQUIRE(chunked.grads.size() == whole.grads.size());
    for (size_t p = 0; p < whole.grads.size(); ++p) {
      double worst = 0, scale = 1e-30;
      for (size_t j = 0; j < whole.grads[p].size(); ++j) {
        worst = std::max(worst, std::fabs(whole.grads[p][j] - chunked.grads[p][j]));
        scale = std::max(scale, std::fabs(whole.grads[p][j]));
      }
      INFO("parameter ", p, ": worst difference ", worst, " of a largest gradient ", scale);
      CHECK(worst <= tol * scale);
    }
    INFO("held after forward: whole logits ", whole.held, " B, chunked ", chunked.held, " B");
    CHECK(chunked.held < whole.held);
  }
}
