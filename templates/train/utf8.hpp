// Printing decoded token text as whole UTF-8 characters. A token window can
// start or end inside a multi-byte character (byte-fallback tokens "<0xNN>"),
// and a model can emit byte sequences that are not UTF-8 at all.
#pragma once

#include <cstddef>
#include <string>

namespace gc::tree {

// Length of the well-formed UTF-8 character at text[pos] (RFC 3629: no
// overlong forms, no surrogates, at most U+10FFFF), or 0 when there is none.
inline std::size_t utf8_char_length(const std::string& text, std::size_t pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = byte(pos);
  if (b0 < 0x80) return 1;
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (pos + len > text.size()) return 0;
  if (byte(pos + 1) < lo || byte(pos + 1) > hi) return 0;
  for (std::size_t i = 2; i < len; ++i) {
    if (byte(pos + i) < 0x80 || byte(pos + i) > 0xBF) return 0;
  }
  return len;
}

// `text` with the parts of characters cut off by the window dropped (stray
// continuation bytes at the start, an incomplete character at the end) and
// every other malformed byte shown as U+FFFD, so the result is valid UTF-8.
inline std::string whole_utf8_chars(const std::string& text) {
  std::size_t begin = 0;
  while (begin < text.size() && begin < 3 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) ++begin;
  std::string out;
  for (std::size_t i = begin; i < text.size();) {
    const std::size_t len = utf8_char_length(text, i);
    if (len > 0) {
      out.append(text, i, len);
      i += len;
      continue;
    }
    // A lead byte whose character runs past the end: cut off by the window.
    const unsigned char b = static_cast<unsigned char>(text[i]);
    const std::size_t want = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 ? 2 : 0;
    bool truncated = want > 0 && i + want > text.size();
    for (std::size_t j = i + 1; truncated && j < text.size(); ++j) {
      truncated = (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80;
    }
    if (truncated) break;
    out += "\xEF\xBF\xBD";
    ++i;
  }
  return out;
}

}  // namespace gc::tree
