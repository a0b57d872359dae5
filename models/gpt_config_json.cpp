// GPTConfig::to_json / from_json: the model's shape as the JSON object that travels with a
// checkpoint (train_gpt's DIR/config.json, the "config" line of its metrics), written and read in
// this one place.
#include <kiln/models/gpt.h>

#include <nlohmann/json.hpp>

#include <utility>

#include <kiln/core/error.h>

namespace kiln::models {

std::string GPTConfig::to_json(int indent) const {
  nlohmann::json j = {{"vocab_size", vocab_size}, {"padded_vocab_size", padded_vocab_size},
                      {"block_size", block_size}, {"n_layer", n_layer},
                      {"n_head", n_head},         {"n_embd", n_embd},
                      {"bias", bias}};
  if (dropout != 0.0) j["dropout"] = dropout;  // a training setting; absent (0) in inference configs
  return j.dump(indent);
}

GPTConfig GPTConfig::from_json(const std::string& text, const std::string& origin) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  KILN_CHECK(j.is_object(), origin, " is not a JSON object");
  GPTConfig c;
  for (auto [key, field] : {std::pair{"vocab_size", &c.vocab_size}, {"padded_vocab_size", &c.padded_vocab_size},
                            {"block_size", &c.block_size}, {"n_layer", &c.n_layer}, {"n_head", &c.n_head},
                            {"n_embd", &c.n_embd}}) {
    KILN_CHECK(j.contains(key) && j[key].is_number_integer(), origin, " lacks the integer \"", key, "\"");
    *field = j[key].get<int64_t>();
  }
  if (j.contains("bias")) {
    KILN_CHECK(j["bias"].is_boolean(), origin, ": \"bias\" is not true or false");
    c.bias = j["bias"].get<bool>();
  }
  if (j.contains("dropout")) {
    KILN_CHECK(j["dropout"].is_number(), origin, ": \"dropout\" is not a number");
    c.dropout = j["dropout"].get<double>();
  }
  return c;
}

}  // namespace kiln::models
