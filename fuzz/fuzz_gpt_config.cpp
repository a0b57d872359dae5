// Fuzzes GPTConfig::from_json (models/gpt.h): any bytes as a config.json. Accepted: the config is
// a valid model shape (validate() passes) and survives to_json/from_json unchanged.
#include <kiln/models/gpt.h>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kiln::fuzz::run_reader([&] {
    using kiln::models::GPTConfig;
    const GPTConfig c = GPTConfig::from_json(text, "fuzz config");
    c.validate();
    const GPTConfig back = GPTConfig::from_json(c.to_json(), "round trip");
    kiln::fuzz::check(back.vocab_size == c.vocab_size && back.padded_vocab_size == c.padded_vocab_size &&
                          back.block_size == c.block_size && back.n_layer == c.n_layer &&
                          back.n_head == c.n_head && back.n_embd == c.n_embd && back.bias == c.bias &&
                          back.dropout == c.dropout,
                      "GPTConfig does not survive to_json/from_json");
  });
  return 0;
}
