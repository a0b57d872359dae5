// GPT-2's byte-level BPE tokenizer (encoder.json + vocab.bpe, as in OpenAI's encoder.py, tiktoken's
// "gpt2" and Hugging Face's GPT2Tokenizer): pre-tokenization (gpt2_pretokenize.h), bytes mapped to
// printable code points, merges applied by rank, the special token <|endoftext|>. Encoding is
// exact on any bytes (decode(encode(x)) == x); encode_batch spreads documents over threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::data {

constexpr uint32_t kGpt2EndOfText = 50256;  ///< <|endoftext|> in GPT-2's vocabulary
inline constexpr std::string_view kEndOfTextString = "<|endoftext|>";

/// GPT-2's bytes_to_unicode: byte b -> the code point its token strings use for it. Printable
/// bytes keep their code point ('!'..'~', '¡'..'¬', '®'..'ÿ'); the other 68, in order, take 256...
std::vector<uint32_t> gpt2_byte_to_unicode();

/// Where the tokenizer files live: $KILN_CACHE/gpt2 if KILN_CACHE is set, else
/// $XDG_CACHE_HOME/kiln/gpt2, else ~/.cache/kiln/gpt2 (scripts/get-gpt2-tokenizer.sh fills it).
std::string gpt2_tokenizer_dir();

/// A cache of piece -> ids for one thread (the merge loop runs once per distinct piece). Cleared
/// when it holds `capacity` pieces, so memory stays bounded on any input.
class BpeCache {
 public:
  explicit BpeCache(size_t capacity = 1 << 18) : capacity_(capacity) {}

 private:
  friend class Gpt2Tokenizer;
  size_t capacity_;
  std::unordered_map<std::string, std::vector<uint32_t>> map_;
};

/// Immutable once built: every const method may run on many threads at once.
class Gpt2Tokenizer {
 public:
  /// From the files' contents: encoder.json (token string -> id) and vocab.bpe ("#version" line,
  /// then one merge "a b" per line, best first). A malformed table fails naming `source`, the line
  /// or token and what is wrong.
  Gpt2Tokenizer(std::string_view encoder_json, std::string_view vocab_bpe, std::string_view source = "GPT-2 tokenizer");

  /// DIR/encoder.json and DIR/vocab.bpe (default: gpt2_tokenizer_dir()). A missing file fails
  /// naming it and the command that fetches it.
  static Gpt2Tokenizer load(const std::string& dir = gpt2_tokenizer_dir());

  /// The ids of `text` read as plain text: "<|endoftext|>" in it is 7 ordinary tokens, as in
  /// OpenAI's encoder.py and tiktoken's encode_ordinary. Any bytes (Note [Invalid UTF-8]).
  std::vector<uint32_t> encode(std::string_view text, BpeCache* cache = nullptr) const;
  /// As encode, but each "<|endoftext|>" in `text` is the special token kGpt2EndOfText.
  std::vector<uint32_t> encode_with_special(std::string_view text, BpeCache* cache = nullptr) const;
  /// encode() of each document on up to `threads` threads (0: all cores), each with its own cache.
  std::vector<std::vector<uint32_t>> encode_batch(const std::vector<std::string_view>& docs, int threads = 0) const;

  /// The bytes of `ids` joined (not necessarily valid UTF-8 when a character is split between
  /// ids). An id outside the vocabulary fails naming it.
  std::string decode(const std::vector<uint32_t>& ids) const;
  const std::string& token_bytes(uint32_t id) const;

  /// The BPE of one piece's bytes (no pre-tokenization): the merges applied by rank.
  std::vector<uint32_t> bpe(std::string_view piece) const;

  size_t vocab_size() const { return bytes_of_.size(); }  ///< 50257 for GPT-2
  size_t merge_count() const { return merges_.size(); }  ///< 50000 for GPT-2
  uint32_t end_of_text() const { return end_of_text_; }

 private:
  struct Merge {
    uint32_t rank, id;
  };
  static uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }
  void encode_piece(std::string_view piece, BpeCache& cache, std::vector<uint32_t>& out) const;

  std::vector<std::string> bytes_of_;                 ///< id -> the token's bytes
  std::unordered_map<std::string, uint32_t> id_of_;   ///< bytes -> id
  std::unordered_map<uint64_t, Merge> merges_;        ///< (left id, right id) -> rank, merged id
  uint32_t byte_id_[256] = {};                        ///< the id of each single byte
  uint32_t end_of_text_ = kGpt2EndOfText;
};

}  // namespace kiln::data
