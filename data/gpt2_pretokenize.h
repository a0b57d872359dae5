// GPT-2's pre-tokenization: the text is cut into pieces by the regex of OpenAI's encoder.py
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (tried in that order at each position), and BPE then runs inside each piece. The regex is
// implemented by hand over the classes of unicode_class.h: no regex engine, one pass, no
// backtracking beyond the single character the look-ahead gives back.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace kiln::data {

// Note [Invalid UTF-8]
// GPT-2's encoder reads str, so its regex never sees invalid UTF-8; Kiln's tokenizer takes any
// bytes (a shard builder should not die on one bad byte in a crawl). A byte that does not start a
// well-formed UTF-8 sequence is one character of class "other" (as U+FFFD, its usual stand-in,
// is: category So), so it joins ` ?[^\s\p{L}\p{N}]+` pieces. BPE works on the piece's bytes, so
// decoding gives back the original bytes exactly, valid or not. On valid UTF-8 the pieces are
// exactly the regex's.

/// The end (byte offset) of the piece that starts at `begin` (< text.size()).
size_t gpt2_piece_end(std::string_view text, size_t begin);

/// All pieces of `text`, in order; their concatenation is `text`.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace kiln::data
