// GPT-2's pre-tokenization by hand (data/gpt2_pretokenize.h) and the Unicode classes under it, and
// the BPE merge loop on a toy vocabulary: no tokenizer files needed (test_gpt2_tokenizer.cpp
// checks the real vocabulary against the reference encoder's ids).
#include <nlohmann/json.hpp>

#include <random>

#include <kiln/data/unicode_class.h>

#include "data/shard_fixtures.h"
#include "test_util.h"

using namespace kiln;
using namespace kiln::data;
using unicode::CharClass;

namespace {

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> out;
  for (auto p : gpt2_pretokenize(text)) out.emplace_back(p);
  return out;
}

using V = std::vector<std::string>;

}  // namespace

TEST_CASE("char_class follows Unicode L, N and White_Space") {
  CHECK(unicode::char_class('a') == CharClass::kLetter);
  CHECK(unicode::char_class('Z') == CharClass::kLetter);
  CHECK(unicode::char_class('7') == CharClass::kNumber);
  CHECK(unicode::char_class(' ') == CharClass::kSpace);
  CHECK(unicode::char_class('\t') == CharClass::kSpace);
  CHECK(unicode::char_class('_') == CharClass::kOther);
  CHECK(unicode::char_class('\'') == CharClass::kOther);
  CHECK(unicode::char_class(0x85) == CharClass::kSpace);    // NEL
  CHECK(unicode::char_class(0xA0) == CharClass::kSpace);    // no-break space
  CHECK(unicode::char_class(0xAA) == CharClass::kLetter);   // ª (Lo)
  CHECK(unicode::char_class(0xBD) == CharClass::kNumber);   // ½ (No)
  CHECK(unicode::char_class(0xE9) == CharClass::kLetter);   // é
  CHECK(unicode::char_class(0x301) == CharClass::kOther);   // combining acute (Mn)
  CHECK(unicode::char_class(0x3000) == CharClass::kSpace);  // ideographic space
  CHECK(unicode::char_class(0x4E2D) == CharClass::kLetter); // 中
  CHECK(unicode::char_class(0x216B) == CharClass::kNumber); // Ⅻ (Nl)
  CHECK(unicode::char_class(0x1F600) == CharClass::kOther); // 😀 (So)
  CHECK(unicode::char_class(0xFEFF) == CharClass::kOther);  // BOM is not White_Space
  CHECK(unicode::char_class(0x10FFFF) == CharClass::kOther);
  CHECK(unicode::char_class(0x110000) == CharClass::kOther);
  CHECK(std::string(unicode::kUnicodeVersion).size() >= 4);
}

TEST_CASE("read_utf8 takes well-formed sequences and reads every other byte alone") {
  auto read = [](std::string s) { return unicode::read_utf8(s, 0); };
  auto u = read("\xE4\xB8\xAD");  // 中
  CHECK(u.valid);
  CHECK(u.cp == 0x4E2D);
  CHECK(u.bytes == 3);
  u = read("\xF0\x9F\x98\x80");
  CHECK((u.valid && u.cp == 0x1F600 && u.bytes == 4));
  for (std::string bad : {"\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                          "\xF8\x88\x80\x80", "\xFF", "\xE4\xB8", "\xC3", "\xC3(", "\xF0\x9F\x98"}) {
    u = read(bad);
    CHECK_FALSE(u.valid);
    CHECK(u.bytes == 1);
  }
}

TEST_CASE("gpt2_pretokenize matches the regex alternatives in order") {
  CHECK(split("Hello world") == V{"Hello", " world"});
  CHECK(split("Hello, world!") == V{"Hello", ",", " world", "!"});
  CHECK(split("don't I'll we've 'S") == V{"don", "'t", " I", "'ll", " we", "'ve", " '", "S"});
  CHECK(split("''s") == V{"''", "s"});
  CHECK(split("abc123 456") == V{"abc", "123", " 456"});
  CHECK(split("a  b") == V{"a", " ", " b"});
  CHECK(split("a   b") == V{"a", "  ", " b"});
  CHECK(split("x  ") == V{"x", "  "});
  CHECK(split("x\n\ny") == V{"x", "\n", "\n", "y"});  // only a space joins the next word
  CHECK(split(" \n \n x") == V{" \n \n", " x"});
  CHECK(split("\t x") == V{"\t", " x"});
  CHECK(split("a \u3000b") == V{"a", " ", "\u3000", "b"});
  CHECK(split("x\u0085y") == V{"x", "\u0085", "y"});  // NEL is White_Space
  CHECK(split("  ") == V{"  "});
  CHECK(split("!! ?? ") == V{"!!", " ??", " "});
  CHECK(split("e\u0301x") == V{"e", "\u0301", "x"});  // a combining mark is "other"
  CHECK(split("") == V{});
}

TEST_CASE("gpt2_pretokenize splits any bytes into pieces that join back to them") {
  // Invalid UTF-8 is "other" (Note [Invalid UTF-8]): it joins punctuation runs.
  CHECK(split("ab\xFF\xFE" "cd") == V{"ab", "\xFF\xFE", "cd"});
  CHECK(split(" \x80!x") == V{" \x80!", "x"});
  CHECK(split("\xE4\xB8") == V{"\xE4\xB8"});  // truncated 3-byte sequence: two "other" bytes
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(trial % 2 ? rng() % 256 : " a1'\n\xC3\xA9\xE4"[rng() % 8]);
    std::string joined;
    for (auto p : gpt2_pretokenize(s)) {
      CHECK_FALSE(p.empty());
      joined += p;
    }
    CHECK(joined == s);
  }
}

namespace {

// A toy byte-level vocabulary: the 256 byte tokens, <|endoftext|>, then one token per merge.
Gpt2Tokenizer toy(const std::vector<std::pair<std::string, std::string>>& merges) {
  const auto table = gpt2_byte_to_unicode();
  auto str = [&](const std::string& bytes) {
    std::string s;
    for (unsigned char b : bytes) {
      uint32_t cp = table[b];
      if (cp < 0x80) s += char(cp);
      else s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
    }
    return s;
  };
  nlohmann::json enc = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) enc[str(std::string(1, char(b)))] = b;
  enc["<|endoftext|>"] = 256;
  std::string bpe = "#version: 0.2\n";
  int id = 257;
  for (auto& [a, b] : merges) {
    if (!enc.contains(str(a + b))) enc[str(a + b)] = id++;
    bpe += str(a) + " " + str(b) + "\n";
  }
  return Gpt2Tokenizer(enc.dump(), bpe, "toy");
}

}  // namespace

TEST_CASE("BPE merges the lowest-ranked pair first, every occurrence left to right") {
  Gpt2Tokenizer t = toy({{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"a", "a"}, {" ", "x"}});
  CHECK(t.vocab_size() == 257 + 5);
  CHECK(t.merge_count() == 5);
  CHECK(t.end_of_text() == 256);
  const uint32_t bc = 257, ab = 258, abc = 259, aa = 260, sx = 261;
  CHECK(t.bpe("abc") == std::vector<uint32_t>{abc});  // b c (rank 0) before a b (rank 1)
  CHECK(t.bpe("abab") == std::vector<uint32_t>{ab, ab});
  CHECK(t.bpe("aaa") == std::vector<uint32_t>{aa, 'a'});  // non-overlapping, from the left
  CHECK(t.bpe("aaaaa") == std::vector<uint32_t>{aa, aa, 'a'});
  CHECK(t.bpe("zbc") == std::vector<uint32_t>{'z', bc});
  CHECK(t.encode("abc xabc") == std::vector<uint32_t>{abc, sx, abc});  // pieces "abc", " xabc"
  CHECK(t.decode(t.encode("abc xabc")) == "abc xabc");
  CHECK(t.encode_with_special("ab<|endoftext|>ab") == std::vector<uint32_t>{ab, 256, ab});
  CHECK(t.encode("<|endoftext|>").size() == 13);  // plain text; the toy has no merges for it: 13 bytes
  CHECK(t.decode({256}) == "<|endoftext|>");
  CHECK_ERROR_CONTAINS(t.decode({'a', 262}), "token id 262", "outside the vocabulary (262 tokens)");
}

TEST_CASE("a malformed table fails naming the problem") {
  CHECK_ERROR_CONTAINS(Gpt2Tokenizer("{", "", "src"), "src", "not valid JSON");
  CHECK_ERROR_CONTAINS(Gpt2Tokenizer("{\"a\": 0}", "", "src"), "no \"<|endoftext|>\"");
  CHECK_ERROR_CONTAINS(toy({{"a", "b"}}).decode({9999}), "9999");
  // A merge naming tokens the encoder lacks.
  nlohmann::json enc = nlohmann::json::object();
  const auto table = gpt2_byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    uint32_t cp = table[size_t(b)];
    std::string s = cp < 0x80 ? std::string(1, char(cp)) : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    enc[s] = b;
  }
  enc["<|endoftext|>"] = 256;
  CHECK_ERROR_CONTAINS(Gpt2Tokenizer(enc.dump(), "#version: 0.2\na b\n", "src"), "src", "vocab.bpe line 2",
                       "encoder.json does not have");
  CHECK_ERROR_CONTAINS(Gpt2Tokenizer(enc.dump(), "#version: 0.2\nab\n", "src"), "vocab.bpe line 2",
                       "is not \"left right\"");
  test::ScratchDir dir;
  CHECK_ERROR_CONTAINS(Gpt2Tokenizer::load(dir.path.string()), "encoder.json", "is missing", "get-gpt2-tokenizer.sh");
}

