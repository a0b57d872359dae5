// The GPT-2 tokenizer on the real vocabulary (encoder.json + vocab.bpe from
// scripts/get-gpt2-tokenizer.sh): ids equal the reference encoder's on the committed vectors
// (tests/data/tokenizer/gpt2_vectors.json), every vocabulary token encodes to itself, and
// decode(encode(x)) == x on random bytes. Without the files the suite exits 77 (skipped).
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "parallel/temp_dir.h"
#include "test_util.h"

using namespace kiln;
using namespace kiln::data;

namespace {

const Gpt2Tokenizer& tokenizer() {
  static const Gpt2Tokenizer t = [] {
    const std::string dir = gpt2_tokenizer_dir();
    if (!std::filesystem::exists(dir + "/encoder.json") || !std::filesystem::exists(dir + "/vocab.bpe")) {
      std::printf("SKIPPED: no GPT-2 tokenizer files in %s (run scripts/get-gpt2-tokenizer.sh)\n", dir.c_str());
      std::exit(77);
    }
    return Gpt2Tokenizer::load(dir);
  }();
  return t;
}

std::string source_file(const std::string& rel) {
  const char* root = std::getenv("KILN_SOURCE_DIR");
  REQUIRE_MESSAGE(root != nullptr, "KILN_SOURCE_DIR is not set (CTest sets it)");
  return std::string(root) + "/" + rel;
}

}  // namespace

TEST_CASE("the vocabulary loads: 50257 tokens, 50000 merges, <|endoftext|> = 50256") {
  const auto& t = tokenizer();
  CHECK(t.vocab_size() == 50257);
  CHECK(t.merge_count() == 50000);
  CHECK(t.end_of_text() == kGpt2EndOfText);
  CHECK(t.token_bytes(50256) == "<|endoftext|>");
  CHECK(t.token_bytes(220) == " ");
  CHECK(t.token_bytes(198) == "\n");
}

TEST_CASE("ids equal the reference encoder's on the committed vectors") {
  const auto& t = tokenizer();
  std::ifstream in(source_file("tests/data/tokenizer/gpt2_vectors.json"));
  REQUIRE(in.good());
  const auto vectors = nlohmann::json::parse(in);
  REQUIRE(vectors.size() >= 50);
  size_t tokens = 0;
  std::vector<std::string_view> docs;
  std::vector<std::vector<uint32_t>> expected;
  for (const auto& c : vectors) {
    const auto& text = c["text"].get_ref<const std::string&>();
    const auto ids = c["ids"].get<std::vector<uint32_t>>();
    CAPTURE(text);
    CHECK(t.encode(text) == ids);
    CHECK(t.decode(ids) == text);
    docs.emplace_back(text);
    expected.push_back(ids);
    tokens += ids.size();
  }
  CHECK(tokens > 2000);
  // The same over threads, each with its own cache.
  CHECK(t.encode_batch(docs, 3) == expected);
  CHECK(t.encode("Hello world") == std::vector<uint32_t>{15496, 995});
}

TEST_CASE("<|endoftext|> is plain text to encode() and the special token to encode_with_special()") {
  const auto& t = tokenizer();
  const std::string text = "Hello<|endoftext|>World <|endoftext|>";
  const auto plain = t.encode(text), special = t.encode_with_special(text);
  CHECK(std::count(plain.begin(), plain.end(), kGpt2EndOfText) == 0);
  CHECK(std::count(special.begin(), special.end(), kGpt2EndOfText) == 2);
  CHECK(special == std::vector<uint32_t>{15496, 50256, 10603, 220, 50256});
  CHECK(t.decode(plain) == text);
  CHECK(t.decode(special) == text);
}

TEST_CASE("every token of the vocabulary encodes to itself") {
  // encode_piece's shortcut (a piece that is a token is that token) rests on this.
  const auto& t = tokenizer();
  int bad = 0;
  for (uint32_t id = 0; id < t.vocab_size(); ++id) {
    if (id == t.end_of_text()) continue;
    if (t.bpe(t.token_bytes(id)) != std::vector<uint32_t>{id}) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("decode(encode(x)) == x on random bytes, invalid UTF-8 included") {
  const auto& t = tokenizer();
  std::mt19937_64 rng(24);
  const char* pool[] = {" ", "  ", "\n", "\t", "the", " of", "'s", "'ll", "123", "é", "中文", "😀", "\xF0\x9F",
                        "\xFF", "\x80", "!?", "<|endoftext|>", "\r\n", "\xC2\x85", "\xE3\x80\x80", "a"};
  BpeCache cache(64);  // small: clearing it must not change results
  for (int trial = 0; trial < 2000; ++trial) {
    std::string s;
    const int n = int(rng() % 40);
    for (int i = 0; i < n; ++i) {
      if (trial % 3 == 0) s += char(rng() % 256);
      else s += pool[rng() % (sizeof pool / sizeof *pool)];
    }
    const auto ids = t.encode(s, &cache);
    CAPTURE(s);
    REQUIRE(t.decode(ids) == s);
    CHECK(t.encode(s) == ids);
    CHECK(t.decode(t.encode_with_special(s)) == s);
  }
  // A long piece (one run of letters) stays exact.
  std::string word;
  for (int i = 0; i < 20000; ++i) word += char('a' + rng() % 26);
  CHECK(t.decode(t.encode(word)) == word);
}

TEST_CASE("encode_gpt2_documents: <|endoftext|> before every document, in files and between them") {
  const auto& t = tokenizer();
  test::TempDir dir("kiln_docs");
  const std::string a = dir.path + "/a.txt", b = dir.path + "/b.txt";
  std::ofstream(a, std::ios::binary) << "Hello world<|endoftext|><|endoftext|> second";
  std::ofstream(b, std::ios::binary) << "third doc\n";
  std::vector<DocumentProgress> seen;
  const std::vector<uint16_t> got = encode_gpt2_documents({a, b}, t, 2, [&](const DocumentProgress& p) { seen.push_back(p); });
  std::vector<uint16_t> want;
  for (const char* doc : {"Hello world", " second", "third doc\n"}) {  // the empty piece between the markers is dropped
    want.push_back(uint16_t(kGpt2EndOfText));
    for (uint32_t id : t.encode(doc)) want.push_back(uint16_t(id));
  }
  CHECK(got == want);
  REQUIRE(seen.size() == 1);  // both files fit one batch
  CHECK(seen[0].files_done == 2);
  CHECK(seen[0].documents == 3);
  CHECK(seen[0].tokens == got.size());
}
