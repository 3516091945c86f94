#include "ring/json_escape.h"

namespace ls::wire {

namespace {

// Length of the valid UTF-8 sequence at s[i..] (2–4), or 0 if invalid (overlong, surrogate,
// > U+10FFFF, truncated).
size_t utf8_seq_len(const unsigned char* s, size_t n) {
  const unsigned char c = s[0];
  auto cont = [&](size_t k) { return k < n && (s[k] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0;  // overlong
    if (c == 0xED && s[1] >= 0xA0) return 0;  // UTF-16 surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && s[1] < 0x90) return 0;
    if (c == 0xF4 && s[1] >= 0x90) return 0;
    return 4;
  }
  return 0;
}

}  // namespace

void json_escape_append(std::string& out, std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    size_t run = i;  // copy plain ASCII runs in one append
    while (run < n && s[run] >= 0x20 && s[run] < 0x80 && s[run] != '"' && s[run] != '\\') ++run;
    if (run > i) {
      out.append(text.data() + i, run - i);
      i = run;
      continue;
    }
    const unsigned char c = s[i];
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default: {
          const char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
          out.append(esc, 6);
        }
      }
      ++i;
      continue;
    }
    const size_t len = utf8_seq_len(s + i, n - i);
    if (len == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    // U+2028/U+2029 are valid JSON but break JavaScript consumers that eval lines.
    if (len == 3 && c == 0xE2 && s[i + 1] == 0x80 && (s[i + 2] == 0xA8 || s[i + 2] == 0xA9)) {
      out += s[i + 2] == 0xA8 ? "\\u2028" : "\\u2029";
    } else {
      out.append(text.data() + i, len);
    }
    i += len;
  }
}

}  // namespace ls::wire
