// GPT-2 token ids -> text: encoder.json (token string -> id) reversed, then GPT-2's byte decoder
// (the inverse of bytes_to_unicode, which maps every byte to a printable code point so that BPE
// token strings are valid text). sample_gpt uses it for GPT-2 vocabularies.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::apps {

// GPT-2's bytes_to_unicode: byte b -> the code point its token strings use for it.
std::vector<uint32_t> gpt2_byte_to_unicode();

class BpeDecoder {
 public:
  // Reads an encoder.json (a JSON object of token string -> id); a bad file is a kiln::Error.
  explicit BpeDecoder(const std::string& encoder_json_path);
  // The bytes of token `id` (UTF-8 text once the tokens of a character are joined); an id the
  // encoder does not have fails naming it.
  std::string decode(int64_t id) const;
  size_t size() const { return tokens_.size(); }

 private:
  std::unordered_map<int64_t, std::string> tokens_;  // id -> decoded bytes
};

}  // namespace kiln::apps
