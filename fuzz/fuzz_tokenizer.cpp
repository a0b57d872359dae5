// Fuzzes Gpt2Tokenizer (data/gpt2_tokenizer.h). The first byte picks what the rest is:
//   even: text for GPT-2's own tables (loaded once from gpt2_tokenizer_dir(); the harness stops
//         with a message when they are absent). Checks: encode never throws, every id is in the
//         vocabulary, decode(encode(x)) == x on any bytes, and the same for encode_with_special.
//   odd:  a pair of tables, encoder.json and vocab.bpe split at the first NUL byte. Either
//         refused with kiln::Error, or accepted and then an encoder that round-trips the text
//         "kiln fuzz" if its vocabulary has every byte of it, and throws kiln::Error otherwise.
#include <cstdio>
#include <optional>

#include <kiln/data/gpt2_tokenizer.h>

#include "fuzz_input.h"

namespace {

using kiln::data::Gpt2Tokenizer;

const Gpt2Tokenizer& gpt2() {
  static const std::optional<Gpt2Tokenizer> tok = [] {
    try {
      return std::optional<Gpt2Tokenizer>(Gpt2Tokenizer::load());
    } catch (const kiln::Error& e) {
      std::fprintf(stderr, "fuzz_tokenizer needs GPT-2's tables (scripts/get-gpt2-tokenizer.sh): %s\n", e.what());
      std::exit(1);
    }
  }();
  return *tok;
}

void check_round_trip(const Gpt2Tokenizer& tok, std::string_view text) {
  const std::vector<uint32_t> ids = tok.encode(text);
  for (uint32_t id : ids) kiln::fuzz::check(id < tok.vocab_size(), "encode gave an id outside the vocabulary");
  kiln::fuzz::check(tok.decode(ids) == text, "decode(encode(x)) != x");
  const std::vector<uint32_t> special = tok.encode_with_special(text);
  kiln::fuzz::check(tok.decode(special) == text, "decode(encode_with_special(x)) != x");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    // Any exception here is a finding: encoding text with valid tables must not fail.
    try {
      check_round_trip(gpt2(), rest);
    } catch (const std::exception& e) {
      kiln::fuzz::finding(std::string("GPT-2 encode/decode threw: ") + e.what());
    }
    return 0;
  }
  const size_t nul = rest.find('\0');
  const std::string_view encoder_json = rest.substr(0, nul);
  const std::string_view vocab_bpe = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  kiln::fuzz::run_reader([&] {
    const Gpt2Tokenizer tok(encoder_json, vocab_bpe, "fuzz tables");
    check_round_trip(tok, "kiln fuzz");
  });
  return 0;
}
