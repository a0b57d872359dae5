// The Hugging Face GPT-2 round trip: a GPT trained here for a few AdamW steps is saved with
// save_gpt_hf, and hf_gpt2.py (GPT2LMHeadModel's forward in plain torch, reading HF's names and
// Conv1D layout from the file) must give Kiln's logits over the real vocabulary (relative 1e-5;
// Kiln runs f32, torch f64). Without python3 + torch it exits 77 (skipped).
#include "parity_util.h"

#include <sys/wait.h>

#include <cstdlib>

#include <kiln/models/models.h>
#include <kiln/optim/optim.h>

#include "data/shard_fixtures.h"

using namespace kiln;

TEST_CASE("a trained GPT saved as HF GPT-2 safetensors gives the same logits in PyTorch") {
  const char* python = std::getenv("KILN_TORCH_PYTHON");
  const char* script = std::getenv("KILN_HF_GPT2_PY");
  REQUIRE(python != nullptr);
  REQUIRE(script != nullptr);
  // The padded rows (301 -> 320) must not reach the file.
  const models::GPTConfig c{.vocab_size = 301, .padded_vocab_size = 320, .block_size = 32,
                           .n_layer = 2, .n_head = 4, .n_embd = 32};
  default_generator().manual_seed(24);
  auto model = std::make_shared<models::GPT>(models::GPTOptions(c).seed(24));
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-2).weight_decay(0.1));
  Generator g(5);
  const Tensor x = randint(0, c.vocab_size, {4, 16}, g), y = randint(0, c.vocab_size, {4, 16}, g);
  double first = 0, last = 0;
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    Tensor loss = model->loss(x, y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  REQUIRE(last < first);  // the weights moved away from their init

  test::ScratchDir dir;
  const std::string weights = (dir.path / "model.safetensors").string(), ids = (dir.path / "ids.safetensors").string(),
                    out = (dir.path / "logits.safetensors").string();
  models::save_gpt_hf(*model, weights);
  const Tensor idx = randint(0, c.vocab_size, {2, 32}, g);
  save_safetensors(ids, {{"idx", idx}});
  const std::string cmd = std::string(python) + " " + script + " " + weights + " " + ids + " " + out + " " +
                          std::to_string(c.n_head);
  const int status = std::system(cmd.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    std::printf("SKIPPED: no python3 with torch (%s)\n", python);
    std::exit(77);
  }
  REQUIRE_MESSAGE(status == 0, cmd, " failed");

  NoGradGuard no_grad;
  model->eval();
  const Tensor mine = model->forward(idx).narrow(2, 0, c.vocab_size).to(DType::f64).contiguous();
  const Tensor theirs = load_safetensors(out).at("logits");
  REQUIRE(theirs.shape() == mine.shape());
  const double err = test::rel_err(mine, theirs);
  MESSAGE("HF round trip: logits relative error ", err);
  CHECK(err < 1e-5);
}
