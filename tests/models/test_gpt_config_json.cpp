// GPTConfig::to_json / from_json: every preset and an odd config survive the round trip, the text
// keeps train_gpt's config.json keys (sample_gpt reads files written before this code existed),
// and a bad file is an error naming it and the key.
#include "test_util.h"

#include <nlohmann/json.hpp>

using namespace kiln;
using models::GPTConfig;

namespace {

void check_same(const GPTConfig& a, const GPTConfig& b) {
  CHECK(a.vocab_size == b.vocab_size);
  CHECK(a.padded_vocab_size == b.padded_vocab_size);
  CHECK(a.block_size == b.block_size);
  CHECK(a.n_layer == b.n_layer);
  CHECK(a.n_head == b.n_head);
  CHECK(a.n_embd == b.n_embd);
  CHECK(a.dropout == b.dropout);
  CHECK(a.bias == b.bias);
}

}  // namespace

TEST_CASE("every preset round-trips through to_json / from_json") {
  for (const std::string& name : models::gpt_config_names()) {
    CAPTURE(name);
    const GPTConfig c = models::gpt_config(name);
    check_same(GPTConfig::from_json(c.to_json()), c);
    check_same(GPTConfig::from_json(c.to_json(2)), c);
  }
}

TEST_CASE("a config unlike the defaults round-trips: no bias, dropout, odd sizes") {
  const GPTConfig c{.vocab_size = 101, .padded_vocab_size = 128, .block_size = 48, .n_layer = 3, .n_head = 3,
                    .n_embd = 24, .dropout = 0.125, .bias = false};
  const GPTConfig back = GPTConfig::from_json(c.to_json());
  check_same(back, c);
  CHECK(back.dropout != GPTConfig().dropout);  // the check above can fail: not the defaults
  CHECK(back.bias != GPTConfig().bias);
}

TEST_CASE("the text holds train_gpt's config.json keys, dropout only when set") {
  const nlohmann::json j = nlohmann::json::parse(models::gpt_config("gpt-tiny").to_json());
  CHECK(j == nlohmann::json{{"vocab_size", 256}, {"padded_vocab_size", 256}, {"block_size", 128}, {"n_layer", 4},
                            {"n_head", 4}, {"n_embd", 128}, {"bias", true}});
  // A file of the old format (no bias key) reads with the default bias.
  const GPTConfig old = GPTConfig::from_json(
      R"({"vocab_size": 256, "padded_vocab_size": 256, "block_size": 64, "n_layer": 1, "n_head": 2, "n_embd": 32})");
  CHECK(old.block_size == 64);
  CHECK(old.bias);
}

TEST_CASE("malformed configs name the origin and the key") {
  CHECK_ERROR_CONTAINS(GPTConfig::from_json("not json", "ckpt/config.json"), "ckpt/config.json",
                       "not a JSON object");
  CHECK_ERROR_CONTAINS(GPTConfig::from_json(R"({"vocab_size": 256})", "ckpt/config.json"), "ckpt/config.json",
                       "lacks the integer \"padded_vocab_size\"");
  CHECK_ERROR_CONTAINS(
      GPTConfig::from_json(R"({"vocab_size": 256, "padded_vocab_size": 256, "block_size": 64, "n_layer": 1,
                              "n_head": 2.5, "n_embd": 32})"),
      "lacks the integer \"n_head\"");
  CHECK_ERROR_CONTAINS(
      GPTConfig::from_json(R"({"vocab_size": 256, "padded_vocab_size": 256, "block_size": 64, "n_layer": 1,
                              "n_head": 2, "n_embd": 32, "bias": "yes"})"),
      "\"bias\" is not true or false");
}
