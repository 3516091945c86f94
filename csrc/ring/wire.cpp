#include "ring/wire.h"

#include <cstring>

namespace ls::wire {

namespace {

struct Cursor {
  const uint8_t* p;
  size_t left;
  template <class T>
  T take(const char* what) {
    T v;
    bytes(&v, sizeof v, what);
    return v;
  }
  void bytes(void* dst, size_t n, const char* what) {
    if (n > left) throw WireError(std::string("REQUEST record truncated in ") + what);
    std::memcpy(dst, p, n);
    p += n;
    left -= n;
  }
  std::string str(size_t n, const char* what) {
    if (n > left) throw WireError(std::string("REQUEST record truncated in ") + what);
    std::string s(reinterpret_cast<const char*>(p), n);
    p += n;
    left -= n;
    return s;
  }
};

}  // namespace

void decode_request(const uint8_t* payload, size_t size_bytes, DecodedRequest& out) {
  Cursor c{payload, size_bytes};
  const auto h = c.take<RequestHeader>("header");
  if (h.num_choices == 0 || h.num_choices > 128) throw WireError("REQUEST num_choices out of range");
  // Each count must be coverable by the remaining bytes: rejects absurd counts before allocating.
  if (uint64_t(h.num_prompt_ids) * 4 + uint64_t(h.num_logit_bias) * 8 + uint64_t(h.num_stop) * 4 +
          uint64_t(h.num_choices) * 8 > c.left)
    throw WireError("REQUEST counts exceed the record size");
  out.request_id = h.request_id;
  SamplingParams& s = out.sampling;
  s = SamplingParams{};
  s.temperature = h.temperature;
  s.top_p = h.top_p;
  s.min_p = h.min_p;
  s.top_k = h.top_k;
  s.seed = h.seed;
  s.has_seed = (h.flags & kRequestHasSeed) != 0;
  s.ignore_eos = (h.flags & kRequestIgnoreEos) != 0;
  s.presence_penalty = h.presence_penalty;
  s.frequency_penalty = h.frequency_penalty;
  s.repetition_penalty = h.repetition_penalty;
  s.repeat_last_n = h.repeat_last_n;
  s.min_tokens = h.min_tokens;
  out.max_tokens = h.max_tokens;
  out.prompt_ids.resize(h.num_prompt_ids);
  c.bytes(out.prompt_ids.data(), size_t(h.num_prompt_ids) * 4, "prompt ids");
  s.logit_bias.clear();
  for (uint32_t i = 0; i < h.num_logit_bias; ++i) {
    const auto e = c.take<LogitBiasEntry>("logit_bias");
    s.logit_bias.emplace_back(e.token_id, e.bias);
  }
  out.stop.clear();
  for (uint32_t i = 0; i < h.num_stop; ++i) {
    const auto n = c.take<uint32_t>("stop length");
    out.stop.push_back(c.str(n, "stop string"));
  }
  out.framings.clear();
  for (uint32_t i = 0; i < h.num_choices; ++i) {
    const auto np = c.take<uint32_t>("framing");
    const auto ns = c.take<uint32_t>("framing");
    ChoiceFraming f;
    f.prefix = c.str(np, "framing prefix");
    f.suffix = c.str(ns, "framing suffix");
    out.framings.push_back(std::move(f));
  }
  if (c.left != 0) throw WireError("REQUEST record has " + std::to_string(c.left) + " trailing bytes");
}

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
