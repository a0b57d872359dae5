// Code point -> class by binary search in the generated ranges (an ASCII/Latin-1 table first),
// and the lenient UTF-8 reader (see unicode_class.h).
#include "unicode_class.h"

#include <algorithm>
#include <array>

namespace kiln::data::unicode {

namespace {

CharClass search(uint32_t cp) {
  const ClassRange* end = kClassRanges + kClassRangeCount;
  const ClassRange* it =
      std::upper_bound(kClassRanges, end, cp, [](uint32_t v, const ClassRange& r) { return v < r.first; });
  if (it == kClassRanges) return CharClass::kOther;
  --it;
  return cp <= it->last ? it->cls : CharClass::kOther;
}

const std::array<CharClass, 256>& latin1_table() {
  static const std::array<CharClass, 256> table = [] {
    std::array<CharClass, 256> t{};
    for (uint32_t cp = 0; cp < 256; ++cp) t[cp] = search(cp);
    return t;
  }();
  return table;
}

}  // namespace

CharClass char_class(uint32_t cp) {
  if (cp < 256) return latin1_table()[cp];
  return search(cp);
}

Utf8Char read_utf8(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  Utf8Char bad;
  bad.cp = c;
  bad.valid = false;
  if (c < 0x80) return {c, 1, true};
  int extra;
  uint32_t cp, min;
  if ((c & 0xE0) == 0xC0) {
    extra = 1, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    extra = 2, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    extra = 3, cp = c & 0x07, min = 0x10000;
  } else {
    return bad;  // a continuation byte or 0xF8..0xFF where a character should start
  }
  if (i + size_t(extra) >= s.size()) return bad;  // truncated at the end of the string
  for (int k = 1; k <= extra; ++k) {
    const unsigned char d = byte(i + size_t(k));
    if ((d & 0xC0) != 0x80) return bad;
    cp = (cp << 6) | (d & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return bad;  // overlong, too big, surrogate
  return {cp, static_cast<uint8_t>(extra + 1), true};
}

}  // namespace kiln::data::unicode
