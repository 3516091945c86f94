// Code-point helpers shared by the tokenizers: category flags (generated table), a lenient
// UTF-8 decoder with the same error behaviour as the reference tokenizer, UTF-8 encoding and the
// GPT-2 byte <-> code point map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ls::tok {

enum CptFlag : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4 };

struct CptRange {
  uint32_t first, last;
  uint8_t flags;
};
extern const CptRange kCptRanges[];
extern const size_t kCptRangeCount;

// Category flags of a code point (0 = none of \p{L}, \p{N}, \s).
uint8_t cpt_flags(uint32_t cp);

constexpr uint32_t kReplacementChar = 0xFFFD;

// Decodes one code point at text[*pos] and advances *pos. Accepts any well-formed lead/continuation
// pattern (also overlong forms); a byte that does not start such a pattern yields U+FFFD and
// advances by one byte. Code points above U+10FFFF are treated as invalid too.
inline uint32_t utf8_next_lenient(std::string_view s, size_t* pos) {
  const size_t i = *pos, n = s.size();
  const uint8_t b0 = static_cast<uint8_t>(s[i]);
  auto cont = [&](size_t k) { return i + k < n && (static_cast<uint8_t>(s[i + k]) & 0xC0) == 0x80; };
  auto cb = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i + k]) & 0x3F); };
  if (b0 < 0x80) { *pos = i + 1; return b0; }
  if ((b0 & 0x40) == 0) { *pos = i + 1; return kReplacementChar; }
  if ((b0 & 0x20) == 0) {
    if (cont(1)) { *pos = i + 2; return ((b0 & 0x1Fu) << 6) | cb(1); }
  } else if ((b0 & 0x10) == 0) {
    if (cont(1) && cont(2)) { *pos = i + 3; return ((b0 & 0x0Fu) << 12) | (cb(1) << 6) | cb(2); }
  } else if ((b0 & 0x08) == 0) {
    if (cont(1) && cont(2) && cont(3)) {
      const uint32_t cp = ((b0 & 0x07u) << 18) | (cb(1) << 12) | (cb(2) << 6) | cb(3);
      if (cp <= 0x10FFFF) { *pos = i + 4; return cp; }
    }
  }
  *pos = i + 1;
  return kReplacementChar;
}

// Appends the UTF-8 encoding of cp (cp <= 0x10FFFF).
inline void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Byte length implied by a UTF-8 lead byte, by its high nibble only (1 for continuation bytes).
inline size_t utf8_len_from_lead(uint8_t b) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[b >> 4];
}

// GPT-2 byte-level map: bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF map to themselves; the other 68
// bytes, in increasing order, to U+0100, U+0101, ...
uint32_t gpt2_byte_to_cpt(uint8_t b);
// Inverse; returns -1 for code points that are not in the map.
int gpt2_cpt_to_byte(uint32_t cp);

}  // namespace ls::tok
