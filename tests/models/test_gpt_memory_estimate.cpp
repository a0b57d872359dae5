// The memory formula (models/gpt_memory.h) against the CPU allocator: what a GPT step holds after
// its forward (weight copies, activations, the head) to within 1%, and its backward peak to within
// 30% (the transients are modelled coarsely: measured -26% .. +6%), in f32 and bf16 autocast, for
// every recompute mode, with the whole-logits and the chunked head. Shapes whose buffers are
// powers of two, so the allocator's size classes add nothing.
#include "test_util.h"

#include <kiln/core/memory_stats.h>
#include <kiln/models/gpt_memory.h>

using namespace kiln;
using models::GPT;
using models::GPTConfig;
using models::GPTRecompute;

namespace {

struct Measured {
  int64_t after_forward = 0, peak = 0;
};

Measured measure(GPT& model, const Tensor& x, const Tensor& y, bool autocast) {
  Measured m;
  for (int pass = 0; pass < 2; ++pass) {  // the first pass warms the allocator's cache
    model.zero_grad();
    const int64_t base = memory_allocated();
    Tensor loss;
    {
      AutocastGuard guard(DType::bf16, autocast);
      loss = model.loss(x, y);
    }
    m.after_forward = memory_allocated() - base;
    reset_peak_memory_stats();
    loss.backward();
    m.peak = max_memory_allocated() - base;
  }
  return m;
}

}  // namespace

TEST_CASE("the memory formula matches the CPU allocator: after forward within 1%, the peak within 30%") {
  GPTConfig c = models::gpt_config("gpt-tiny");  // V 256, C 128, H 4
  c.n_layer = 3;
  const int64_t b = 4, t = 128;
  Tensor x = test::random({b, t}, DType::f64, 1, 0.0, 256.0).to(DType::i64);
  Tensor y = test::random({b, t}, DType::f64, 2, 0.0, 256.0).to(DType::i64);
  for (bool autocast : {false, true})
    for (bool fused : {false, true})
      for (GPTRecompute mode : {GPTRecompute::none, GPTRecompute::block, GPTRecompute::attention, GPTRecompute::mlp}) {
        GPT model(models::GPTOptions(c).seed(1).recompute(mode).fused_head(fused ? models::GPTFusedHead::on
                                                                                   : models::GPTFusedHead::off));
        const Measured got = measure(model, x, y, autocast);
        const models::GPTMemoryEstimate est = models::estimate_gpt_training_memory(
            c, b, t, models::GPTMemoryOptions{autocast, /*flash_attention=*/false, mode, fused});
        // Without an optimizer, what the step adds to the parameters: the forward's terms, then
        // the peak less the parameters and AdamW's moments.
        const int64_t want_forward = est.weight_copies + est.activations + est.head;
        const int64_t want_peak = est.peak() - est.parameters - est.optimizer;
        INFO("autocast ", autocast, ", fused head ", fused, ", recompute ", std::string(models::gpt_recompute_name(mode)),
             ": after forward ", got.after_forward, " B (formula ", want_forward, "), peak ", got.peak,
             " B (formula ", want_peak, ")");
        CHECK(double(got.after_forward) == doctest::Approx(double(want_forward)).epsilon(0.01));
        CHECK(double(got.peak) == doctest::Approx(double(want_peak)).epsilon(0.30));
      }
}
