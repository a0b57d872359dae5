// GPT-2's byte-level BPE (see gpt2_tokenizer.h): loading the tables, the merge loop, encode/decode.
#include "gpt2_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include <kiln/core/error.h>

#include "gpt2_pretokenize.h"

namespace kiln::data {

std::vector<uint32_t> gpt2_byte_to_unicode() {
  std::vector<uint32_t> out(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    out[b] = printable ? b : next++;
  }
  return out;
}

std::string gpt2_tokenizer_dir() {
  if (const char* cache = std::getenv("KILN_CACHE"); cache && *cache) return std::string(cache) + "/gpt2";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/kiln/gpt2";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/kiln/gpt2";
}

namespace {

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();

// A token string of encoder.json / vocab.bpe (UTF-8 of byte-table code points) -> its bytes.
// Returns false when a code point is not in the byte table (special tokens such as <|endoftext|>
// are plain ASCII, so they pass and read as their own bytes).
bool token_string_bytes(std::string_view s, const std::vector<int>& byte_of_cp, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    const int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    if (extra < 0 || i + size_t(extra) >= s.size()) return false;
    uint32_t cp = extra == 0 ? c : c & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + size_t(k)]) & 0x3F);
    if (cp >= byte_of_cp.size() || byte_of_cp[cp] < 0) return false;
    out->push_back(static_cast<char>(byte_of_cp[cp]));
    i += size_t(extra) + 1;
  }
  return true;
}

std::string read_file(const std::string& path, const char* what) {
  KILN_CHECK_IO(std::filesystem::is_regular_file(path), "GPT-2 tokenizer: ", what, " ", path,
                " is missing; fetch encoder.json and vocab.bpe with scripts/get-gpt2-tokenizer.sh (it writes them "
                "to $KILN_CACHE/gpt2, default ~/.cache/kiln/gpt2) or pass the folder that holds them");
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK_IO(in.good(), "GPT-2 tokenizer: cannot open ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer(std::string_view encoder_json, std::string_view vocab_bpe, std::string_view source) {
  const auto table = gpt2_byte_to_unicode();
  std::vector<int> byte_of_cp(512, -1);
  for (int b = 0; b < 256; ++b) byte_of_cp[table[size_t(b)]] = b;

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(encoder_json);
  } catch (const std::exception& e) {
    KILN_FAIL_VALUE(source, ": encoder.json is not valid JSON: ", e.what());
  }
  KILN_CHECK_VALUE(j.is_object() && !j.empty(), source, ": encoder.json must be a JSON object of token string -> id");
  bytes_of_.assign(j.size(), std::string());
  std::vector<bool> seen(j.size(), false);
  std::string bytes;
  bool have_eot = false;
  for (const auto& [token, value] : j.items()) {
    KILN_CHECK_VALUE(value.is_number_integer(), source, ": encoder.json: the id of \"", token, "\" is not an integer");
    const auto id = value.get<int64_t>();
    KILN_CHECK_VALUE(id >= 0 && id < int64_t(j.size()) && !seen[size_t(id)], source, ": encoder.json: id ", id,
                     " of \"", token, "\" is out of range or repeated (ids must be 0..", j.size() - 1, ")");
    seen[size_t(id)] = true;
    KILN_CHECK_VALUE(token_string_bytes(token, byte_of_cp, &bytes), source, ": encoder.json: token \"", token,
                     "\" has a code point outside GPT-2's byte table");
    bytes_of_[size_t(id)] = bytes;
    if (token == kEndOfTextString) {
      end_of_text_ = uint32_t(id);
      have_eot = true;
      continue;  // special: never produced by encode(), so not in the bytes -> id map
    }
    id_of_.emplace(bytes, uint32_t(id));
  }
  KILN_CHECK_VALUE(have_eot, source, ": encoder.json has no \"<|endoftext|>\" token");
  for (int b = 0; b < 256; ++b) {
    auto it = id_of_.find(std::string(1, char(b)));
    KILN_CHECK_VALUE(it != id_of_.end(), source, ": encoder.json has no token for byte ", b,
                     " (a byte-level vocabulary needs all 256)");
    byte_id_[b] = it->second;
  }

  size_t line_no = 0, begin = 0;
  std::string left, right;
  while (begin < vocab_bpe.size()) {
    size_t end = vocab_bpe.find('\n', begin);
    if (end == std::string_view::npos) end = vocab_bpe.size();
    std::string_view line = vocab_bpe.substr(begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line[0] == '#')) continue;
    const size_t space = line.find(' ');
    KILN_CHECK_VALUE(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                         line.find(' ', space + 1) == std::string_view::npos,
                     source, ": vocab.bpe line ", line_no, " is not \"left right\": \"", line, "\"");
    const bool ok = token_string_bytes(line.substr(0, space), byte_of_cp, &left) &&
                    token_string_bytes(line.substr(space + 1), byte_of_cp, &right);
    KILN_CHECK_VALUE(ok, source, ": vocab.bpe line ", line_no, " has a code point outside GPT-2's byte table");
    auto l = id_of_.find(left), r = id_of_.find(right), m = id_of_.find(left + right);
    KILN_CHECK_VALUE(l != id_of_.end() && r != id_of_.end() && m != id_of_.end(), source, ": vocab.bpe line ",
                     line_no, " (\"", line, "\") names a token that encoder.json does not have");
    const auto rank = uint32_t(merges_.size());
    merges_.emplace(pair_key(l->second, r->second), Merge{rank, m->second});  // a repeated pair keeps its first rank
  }
}

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& dir) {
  const std::string encoder = dir + "/encoder.json", vocab = dir + "/vocab.bpe";
  const std::string encoder_text = read_file(encoder, "encoder.json");  // first: a missing encoder is named first
  return Gpt2Tokenizer(encoder_text, read_file(vocab, "vocab.bpe"), dir);
}

// Note [BPE merge loop]
// As encoder.py: among adjacent pairs take the one whose merge has the lowest rank and merge every
// occurrence of it left to right, until no pair has a merge. Only the ranks next to a merge change,
// so they are looked up again there and nowhere else; a merged pair can never recreate a pair of
// the rank being applied (its left token is new), so one scan per rank suffices.
std::vector<uint32_t> Gpt2Tokenizer::bpe(std::string_view piece) const {
  std::vector<uint32_t> ids(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) ids[i] = byte_id_[static_cast<unsigned char>(piece[i])];
  if (ids.size() < 2) return ids;
  auto rank_of = [&](size_t i) {
    auto it = merges_.find(pair_key(ids[i], ids[i + 1]));
    return it == merges_.end() ? kNoRank : it->second.rank;
  };
  std::vector<uint32_t> ranks(ids.size() - 1);  // ranks[i]: the merge of (ids[i], ids[i + 1])
  for (size_t i = 0; i + 1 < ids.size(); ++i) ranks[i] = rank_of(i);
  while (!ranks.empty()) {
    const auto first = size_t(std::min_element(ranks.begin(), ranks.end()) - ranks.begin());
    const uint32_t rank = ranks[first];
    if (rank == kNoRank) break;
    const uint32_t merged = merges_.find(pair_key(ids[first], ids[first + 1]))->second.id;
    for (size_t i = first; i < ranks.size(); ++i) {
      if (ranks[i] != rank) continue;
      ids[i] = merged;
      ids.erase(ids.begin() + std::ptrdiff_t(i) + 1);
      ranks.erase(ranks.begin() + std::ptrdiff_t(i));
      if (i > 0) ranks[i - 1] = rank_of(i - 1);
      if (i < ranks.size()) ranks[i] = rank_of(i);
    }
  }
  return ids;
}

void Gpt2Tokenizer::encode_piece(std::string_view piece, BpeCache& cache, std::vector<uint32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  std::string key(piece);
  // A piece that is itself a token encodes to it (tests/data/test_gpt2_tokenizer.cpp checks this
  // holds for every token of GPT-2's vocabulary).
  if (auto it = id_of_.find(key); it != id_of_.end()) {
    out.push_back(it->second);
    return;
  }
  auto hit = cache.map_.find(key);
  if (hit == cache.map_.end()) {
    if (cache.map_.size() >= cache.capacity_) cache.map_.clear();
    hit = cache.map_.emplace(std::move(key), bpe(piece)).first;
  }
  out.insert(out.end(), hit->second.begin(), hit->second.end());
}

std::vector<uint32_t> Gpt2Tokenizer::encode(std::string_view text, BpeCache* cache) const {
  BpeCache local;
  BpeCache& c = cache ? *cache : local;
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 1);
  for (size_t i = 0; i < text.size();) {
    const size_t end = gpt2_piece_end(text, i);
    encode_piece(text.substr(i, end - i), c, out);
    i = end;
  }
  return out;
}

std::vector<uint32_t> Gpt2Tokenizer::encode_with_special(std::string_view text, BpeCache* cache) const {
  BpeCache local;
  BpeCache& c = cache ? *cache : local;
  std::vector<uint32_t> out;
  for (size_t begin = 0;;) {
    const size_t at = text.find(kEndOfTextString, begin);
    std::vector<uint32_t> part = encode(text.substr(begin, at == std::string_view::npos ? std::string_view::npos : at - begin), &c);
    out.insert(out.end(), part.begin(), part.end());
    if (at == std::string_view::npos) break;
    out.push_back(end_of_text_);
    begin = at + kEndOfTextString.size();
  }
  return out;
}

std::vector<std::vector<uint32_t>> Gpt2Tokenizer::encode_batch(const std::vector<std::string_view>& docs,
                                                               int threads) const {
  std::vector<std::vector<uint32_t>> out(docs.size());
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  threads = int(std::min<size_t>(size_t(threads), std::max<size_t>(docs.size(), 1)));
  std::atomic<size_t> next{0};
  auto work = [&] {
    BpeCache cache;
    for (size_t d; (d = next.fetch_add(1)) < docs.size();) out[d] = encode(docs[d], &cache);
  };
  if (threads == 1) {
    work();
    return out;
  }
  // encode() throws nothing on any input; a failure here would be std::bad_alloc, which ends the
  // process from the worker as it would from the caller.
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  return out;
}

const std::string& Gpt2Tokenizer::token_bytes(uint32_t id) const {
  KILN_CHECK_INDEX(id < bytes_of_.size(), "GPT-2 tokenizer: token id ", id, " is outside the vocabulary (",
                   bytes_of_.size(), " tokens)");
  return bytes_of_[id];
}

std::string Gpt2Tokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string out;
  for (uint32_t id : ids) out += token_bytes(id);
  return out;
}

}  // namespace kiln::data
