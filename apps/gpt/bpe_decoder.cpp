// GPT-2's byte-level BPE decoding (see bpe_decoder.h): token string code points -> bytes.
#include "bpe_decoder.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>

#include <kiln/core/error.h>

namespace kiln::apps {

std::vector<uint32_t> gpt2_byte_to_unicode() {
  // Printable bytes keep their code point ('!'..'~', '¡'..'¬', '®'..'ÿ'); the other 68 bytes,
  // in increasing order, take 256, 257, ... (as in GPT-2's encoder.py).
  std::vector<uint32_t> out(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    out[b] = printable ? b : next++;
  }
  return out;
}

namespace {

// UTF-8 -> code points; malformed input fails.
std::vector<uint32_t> utf8_code_points(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    KILN_CHECK(extra >= 0, "encoder.json: malformed UTF-8 in token \"", s, "\"");
    uint32_t cp = extra == 0 ? c : c & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) {
      KILN_CHECK(i + k < s.size(), "encoder.json: truncated UTF-8 in token \"", s, "\"");
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    out.push_back(cp);
    i += size_t(extra) + 1;
  }
  return out;
}

}  // namespace

BpeDecoder::BpeDecoder(const std::string& encoder_json_path) {
  std::ifstream in(encoder_json_path);
  KILN_CHECK(in.good(), "cannot open the encoder ", encoder_json_path);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    KILN_FAIL("encoder ", encoder_json_path, " is not valid JSON: ", e.what());
  }
  KILN_CHECK(j.is_object(), "encoder ", encoder_json_path, " must be a JSON object of token string -> id");
  std::map<uint32_t, char> byte_of;
  const auto table = gpt2_byte_to_unicode();
  for (uint32_t b = 0; b < 256; ++b) byte_of[table[b]] = static_cast<char>(b);
  for (const auto& [token, id] : j.items()) {
    KILN_CHECK(id.is_number_integer(), "encoder ", encoder_json_path, ": the id of \"", token, "\" is not an integer");
    std::string bytes;
    for (uint32_t cp : utf8_code_points(token)) {
      auto it = byte_of.find(cp);
      // Special tokens such as <|endoftext|> are plain ASCII and decode to themselves.
      KILN_CHECK(it != byte_of.end(), "encoder ", encoder_json_path, ": token \"", token,
                 "\" has code point ", cp, ", which is not in GPT-2's byte table");
      bytes.push_back(it->second);
    }
    tokens_[id.get<int64_t>()] = std::move(bytes);
  }
}

std::string BpeDecoder::decode(int64_t id) const {
  auto it = tokens_.find(id);
  KILN_CHECK(it != tokens_.end(), "token id ", id, " is not in the encoder (", tokens_.size(), " tokens)");
  return it->second;
}

}  // namespace kiln::apps
