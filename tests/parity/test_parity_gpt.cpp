// Parity with PyTorch 1.13 on a whole GPT (tests/parity/gen_gpt.py): torch's random weights are
// loaded with load_state_dict under the same Hugging Face names, then Kiln's logits, loss over the
// real vocabulary (padded columns sliced off, one ignored target) and every parameter's gradient
// -- the tied wte's included -- must match torch's: relative 1e-4 in f32, 1e-10 in f64.
#include "parity_util.h"

#include <kiln/models/models.h>

using namespace kiln;

namespace {

void run(const SafetensorsFile& file, DType dtype) {
  const std::string d = dtype == DType::f32 ? "f32" : "f64";
  const double tol = dtype == DType::f32 ? 1e-4 : 1e-10;
  CAPTURE(d);
  auto cfg_values = test::values(file.at("config"));
  models::GPTConfig c;
  c.vocab_size = int64_t(cfg_values[0]);
  c.padded_vocab_size = int64_t(cfg_values[1]);
  c.block_size = int64_t(cfg_values[2]);
  c.n_layer = int64_t(cfg_values[3]);
  c.n_head = int64_t(cfg_values[4]);
  c.n_embd = int64_t(cfg_values[5]);
  REQUIRE(c.padded_vocab_size > c.vocab_size);  // the padding path is exercised

  models::GPT model(c);
  model.to(dtype);
  std::map<std::string, Tensor> state;
  for (auto& [name, t] : test::with_prefix(file, "param.")) state[name] = t.to(dtype);
  model.load_state_dict(state);  // strict: the names match torch's one to one

  Tensor idx = file.at("idx"), targets = file.at("targets");
  Tensor logits = model.forward(idx);
  test::check_rel(logits, file.at(d + ".logits"), tol, d + " logits");
  Tensor loss = model.loss(idx, targets);
  loss.backward();
  const double want = file.at(d + ".loss").item();
  CHECK_MESSAGE(std::fabs(loss.item() - want) <= tol * std::fabs(want), d, " loss ", loss.item(), " vs torch ", want);
  MESSAGE(d, " loss ", want, ", relative error ", std::fabs(loss.item() - want) / std::fabs(want));

  auto grads = test::with_prefix(file, d + ".grad.");
  CHECK(grads.size() == model.named_parameters().size());
  double worst = 0;
  for (auto& [name, p] : model.named_parameters()) {
    CAPTURE(name);
    REQUIRE(file.contains(d + ".grad." + name));
    REQUIRE(p.grad().defined());
    const Tensor& g = file.at(d + ".grad." + name);
    test::check_rel(p.grad(), g, tol, d + " grad " + name);
    worst = std::max(worst, test::rel_err(p.grad(), g));
  }
  MESSAGE(d, " worst gradient relative error: ", worst);
}

}  // namespace

TEST_CASE("GPT forward, loss and every gradient match PyTorch") {
  SafetensorsFile file = test::load_oracle("parity_gpt.safetensors");
  run(file, DType::f64);
  run(file, DType::f32);
}
