// Streaming UTF-8 assembly for token pieces. Well-formedness follows the Unicode standard
// (no overlongs, surrogates or code points above U+10FFFF); every maximal ill-formed subpart
// becomes one U+FFFD, the same result as Python's bytes.decode("utf-8", "replace") over the
// whole stream, however the bytes are split across pushes.
#include "tokenizer/tokenizer.h"

namespace ls {

namespace {

constexpr std::string_view kFFFD = "\xEF\xBF\xBD";

// Allowed range of the second byte for a lead byte (the rest are always 80..BF).
inline bool second_ok(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

inline size_t seq_len(uint8_t lead) {  // 0 = never valid as a lead byte
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

}  // namespace

// Converts as much of pending_ as possible into out_; keeps an incomplete (but so far valid)
// tail in pending_ unless `final`, in which case that tail becomes one U+FFFD.
static void drain(std::string& pending, std::string& out, bool final) {
  const auto* p = reinterpret_cast<const uint8_t*>(pending.data());
  const size_t n = pending.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = p[i];
    if (b < 0x80) {  // ASCII run
      size_t j = i + 1;
      while (j < n && p[j] < 0x80) ++j;
      out.append(pending, i, j - i);
      i = j;
      continue;
    }
    const size_t len = seq_len(b);
    if (len == 0) { out += kFFFD; ++i; continue; }
    size_t k = 1;  // bytes of the sequence that are valid so far
    while (k < len && i + k < n) {
      const uint8_t c = p[i + k];
      if (k == 1 ? !second_ok(b, c) : (c & 0xC0) != 0x80) break;
      ++k;
    }
    if (k == len) {
      out.append(pending, i, len);
      i += len;
    } else if (i + k == n && !final) {
      break;  // incomplete: wait for more bytes
    } else {
      out += kFFFD;  // maximal ill-formed subpart
      i += k;
    }
  }
  pending.erase(0, i);
}

std::string_view Utf8Stream::push(std::string_view piece_bytes) {
  out_.clear();
  if (pending_.capacity() < 64) pending_.reserve(64);
  if (out_.capacity() < 256) out_.reserve(256);
  pending_.append(piece_bytes.data(), piece_bytes.size());
  drain(pending_, out_, false);
  return out_;
}

std::string_view Utf8Stream::finish() {
  out_.clear();
  drain(pending_, out_, true);
  pending_.clear();
  return out_;
}

void Utf8Stream::reset() {
  pending_.clear();
  out_.clear();
}

}  // namespace ls
