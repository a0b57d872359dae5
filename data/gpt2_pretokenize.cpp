// GPT-2's pre-tokenization regex by hand (see gpt2_pretokenize.h).
#include "gpt2_pretokenize.h"

#include "unicode_class.h"

namespace kiln::data {

using unicode::CharClass;

namespace {

// The end of the run of characters of class `cls` that starts at i.
size_t run_end(std::string_view s, size_t i, CharClass cls) {
  while (i < s.size()) {
    size_t bytes;
    if (unicode::class_at(s, i, &bytes) != cls) break;
    i += bytes;
  }
  return i;
}

// 's 't 're 've 'm 'll 'd at s[i] == '\'': the contraction's length, or 0.
size_t contraction(std::string_view s, size_t i) {
  const size_t left = s.size() - i;
  if (left >= 2) {
    const char c = s[i + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
  }
  if (left >= 3) {
    const std::string_view two = s.substr(i + 1, 2);
    if (two == "re" || two == "ve" || two == "ll") return 3;
  }
  return 0;
}

}  // namespace

size_t gpt2_piece_end(std::string_view s, size_t i) {
  if (s[i] == '\'') {
    if (size_t n = contraction(s, i)) return i + n;
  }
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a run of one class.
  const size_t j = s[i] == ' ' ? i + 1 : i;
  if (j < s.size()) {
    size_t bytes;
    const CharClass cls = unicode::class_at(s, j, &bytes);
    if (cls != CharClass::kSpace) return run_end(s, j + bytes, cls);
  }
  // s[i] is white space. `\s+(?!\S)`: the whole run if the text ends there, else the run less its
  // last character (which the next piece starts with, as " word" or "\n"); `\s+` when the run is
  // one character before a non-space.
  size_t last = i, k = i;
  while (k < s.size()) {
    size_t bytes;
    if (unicode::class_at(s, k, &bytes) != CharClass::kSpace) break;
    last = k;
    k += bytes;
  }
  if (k == s.size() || last == i) return k;
  return last;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < text.size();) {
    const size_t end = gpt2_piece_end(text, i);
    pieces.push_back(text.substr(i, end - i));
    i = end;
  }
  return pieces;
}

}  // namespace kiln::data
