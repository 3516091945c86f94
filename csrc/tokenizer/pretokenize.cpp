// Hand-written matchers for the pre-tokenizer regexes (over code points, leftmost match, the
// first alternative that matches wins, greedy quantifiers with backtracking worked out by hand).
//
//   gpt2:    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
//   llama3:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2:   same as llama3 with \p{N} instead of \p{N}{1,3}
//   starcoder family (smollm, ...): \p{N} first, then gpt2 over every resulting piece.
//   gpt-4o (gpt-oss, llama4), as llama.cpp rewrites it for its std::regex (letters split by ASCII case
//   only: a non-ASCII letter counts as both "upper" U and "lower" W; C = '[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]):
//     [^\r\n\p{L}\p{N}]?U*W+C?|[^\r\n\p{L}\p{N}]?U+W*C?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//     with U = (?=\p{L})[^a-z] and W = (?=\p{L})[^A-Z].
// Regexes run in sequence; each re-splits every current piece and keeps both the matches and
// the unmatched gaps as pieces.
#include <algorithm>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace ls::tok {

namespace {

using Range = std::pair<uint32_t, uint32_t>;

struct Cursor {
  const uint32_t* cp;
  const uint8_t* fl;
  size_t end;
  bool L(size_t i) const { return fl[i] & kLetter; }
  bool N(size_t i) const { return fl[i] & kNumber; }
  bool S(size_t i) const { return fl[i] & kSpace; }
  bool other(size_t i) const { return (fl[i] & (kLetter | kNumber | kSpace)) == 0; }
  size_t run_letters(size_t i) const { while (i < end && L(i)) ++i; return i; }
  size_t run_numbers(size_t i) const { while (i < end && N(i)) ++i; return i; }
  size_t run_other(size_t i) const { while (i < end && other(i)) ++i; return i; }
  size_t run_space(size_t i) const { while (i < end && S(i)) ++i; return i; }
};

inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// 's 't 're 've 'm 'll 'd at i (cp[i] == '\''); returns match length or 0.
inline size_t contraction(const Cursor& c, size_t i, bool icase) {
  if (i + 1 >= c.end) return 0;
  const uint32_t c1 = icase ? ascii_lower(c.cp[i + 1]) : c.cp[i + 1];
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (i + 2 >= c.end) return 0;
  const uint32_t c2 = icase ? ascii_lower(c.cp[i + 2]) : c.cp[i + 2];
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

size_t match_gpt2(const Cursor& c, size_t i) {
  const uint32_t ch = c.cp[i];
  if (ch == '\'') {
    if (size_t n = contraction(c, i, false)) return n;
  }
  const size_t j = i + (ch == ' ' ? 1 : 0);
  if (j < c.end) {
    if (c.L(j)) return c.run_letters(j) - i;   //  ?\p{L}+
    if (c.N(j)) return c.run_numbers(j) - i;   //  ?\p{N}+
    if (c.other(j)) return c.run_other(j) - i; //  ?[^\s\p{L}\p{N}]+
  }
  if (c.S(i)) {                                 // \s+(?!\S)
    const size_t k = c.run_space(i);
    if (k == c.end) return k - i;
    if (k - i >= 2) return k - i - 1;
  }
  return 0;
}

size_t match_llama3(const Cursor& c, size_t i, size_t max_digits) {
  const uint32_t ch = c.cp[i];
  if (ch == '\'') {
    if (size_t n = contraction(c, i, true)) return n;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c.L(i)) return c.run_letters(i) - i;
  if (ch != '\r' && ch != '\n' && !c.N(i) && i + 1 < c.end && c.L(i + 1)) return c.run_letters(i + 1) - i;
  // \p{N}{1,max}
  if (c.N(i)) {
    size_t k = i;
    while (k < c.end && k - i < max_digits && c.N(k)) ++k;
    return k - i;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  const size_t j = i + (ch == ' ' ? 1 : 0);
  if (j < c.end && c.other(j)) {
    size_t k = c.run_other(j);
    while (k < c.end && (c.cp[k] == '\r' || c.cp[k] == '\n')) ++k;
    return k - i;
  }
  if (!c.S(i)) return 0;
  const size_t k = c.run_space(i);
  // \s*[\r\n]+ : ends after the last \r or \n of the whitespace run
  for (size_t p = k; p > i; --p) {
    if (c.cp[p - 1] == '\r' || c.cp[p - 1] == '\n') return p - i;
  }
  // \s+(?!\S)
  if (k == c.end) return k - i;
  if (k - i >= 2) return k - i - 1;
  // \s+
  return k - i;
}

// gpt-4o's letter alternatives from s (after the optional prefix); returns the end, or s if neither matches.
size_t gpt4o_letters(const Cursor& c, size_t s) {
  auto upper = [&](size_t i) { return c.L(i) && !(c.cp[i] >= 'a' && c.cp[i] <= 'z'); };
  auto lower = [&](size_t i) { return c.L(i) && !(c.cp[i] >= 'A' && c.cp[i] <= 'Z'); };
  size_t u_end = s;
  while (u_end < c.end && upper(u_end)) ++u_end;
  // U*W+: U* gives back one letter at a time until a W starts (a non-ASCII letter is both), then W+ is greedy.
  size_t w = u_end;
  while (w > s && !(w < c.end && lower(w))) --w;
  size_t end = s;
  if (w < c.end && lower(w)) {
    end = w;
    while (end < c.end && lower(end)) ++end;
  } else if (u_end > s) {
    end = u_end;  // U+W*: no W follows the U run (else U*W+ matched)
  } else {
    return s;
  }
  if (end < c.end && c.cp[end] == '\'') end += contraction(c, end, true);
  return end;
}

size_t match_gpt4o(const Cursor& c, size_t i) {
  const uint32_t ch = c.cp[i];
  // [^\r\n\p{L}\p{N}]? then the letters (without the prefix they must start at i)
  if (ch != '\r' && ch != '\n' && !c.L(i) && !c.N(i) && i + 1 < c.end) {
    const size_t e = gpt4o_letters(c, i + 1);
    if (e > i + 1) return e - i;
  }
  if (const size_t e = gpt4o_letters(c, i); e > i) return e - i;
  // \p{N}{1,3}
  if (c.N(i)) {
    size_t k = i;
    while (k < c.end && k - i < 3 && c.N(k)) ++k;
    return k - i;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n/]*
  const size_t j = i + (ch == ' ' ? 1 : 0);
  if (j < c.end && c.other(j)) {
    size_t k = c.run_other(j);
    while (k < c.end && (c.cp[k] == '\r' || c.cp[k] == '\n' || c.cp[k] == '/')) ++k;
    return k - i;
  }
  if (!c.S(i)) return 0;
  const size_t k = c.run_space(i);
  for (size_t p = k; p > i; --p) {  // \s*[\r\n]+
    if (c.cp[p - 1] == '\r' || c.cp[p - 1] == '\n') return p - i;
  }
  if (k == c.end) return k - i;  // \s+(?!\S)
  if (k - i >= 2) return k - i - 1;
  return k - i;  // \s+
}

template <class Match>
void split_all(const std::vector<Range>& in, std::vector<Range>& out, Match match) {
  out.clear();
  for (const Range& r : in) {
    size_t pos = r.first, gap = r.first;
    while (pos < r.second) {
      const size_t n = match(pos, r.second);
      if (n == 0) { ++pos; continue; }
      if (gap < pos) out.emplace_back(static_cast<uint32_t>(gap), static_cast<uint32_t>(pos));
      out.emplace_back(static_cast<uint32_t>(pos), static_cast<uint32_t>(pos + n));
      pos += n;
      gap = pos;
    }
    if (gap < r.second) out.emplace_back(static_cast<uint32_t>(gap), r.second);
  }
}

}  // namespace

bool pre_kind_from_name(std::string_view name, PreKind* kind, bool* ignore_merges) {
  static const char* const kGpt2[] = {"gpt2", "gpt-2", "phi-2"};
  static const char* const kStar[] = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone",
                                      "minerva-7b"};
  static const char* const kLlama3[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"};
  static const char* const kQwen2[] = {"qwen2", "deepseek-r1-qwen"};
  static const char* const kGpt4o[] = {"gpt-4o", "llama4"};
  *ignore_merges = false;
  for (const char* n : kGpt2) if (name == n) { *kind = PreKind::Gpt2; return true; }
  for (const char* n : kStar) if (name == n) { *kind = PreKind::NumThenGpt2; return true; }
  for (const char* n : kLlama3) if (name == n) { *kind = PreKind::Llama3; *ignore_merges = true; return true; }
  for (const char* n : kQwen2) if (name == n) { *kind = PreKind::Qwen2; return true; }
  for (const char* n : kGpt4o) if (name == n) { *kind = PreKind::Gpt4o; return true; }
  return false;
}

void pretokenize(PreKind kind, std::string_view text, PreScratch& s, std::string_view* text_out,
                 std::vector<Range>& out) {
  s.cpts.clear();
  s.flags.clear();
  s.offs.clear();
  bool canonical = true;
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const uint32_t cp = utf8_next_lenient(text, &pos);
    if ((pos - start) != (cp < 0x80 ? 1u : cp < 0x800 ? 2u : cp < 0x10000 ? 3u : 4u)) {
      canonical = false;  // invalid byte or overlong form: the reference re-encodes code points
    }
    s.cpts.push_back(cp);
  }
  if (!canonical) {
    s.canon.clear();
    for (uint32_t cp : s.cpts) utf8_append(s.canon, cp);
    text = s.canon;
  }
  *text_out = text;
  uint32_t off = 0;
  for (uint32_t cp : s.cpts) {
    s.offs.push_back(off);
    off += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    s.flags.push_back(cpt_flags(cp));
  }
  s.offs.push_back(off);

  const size_t n = s.cpts.size();
  s.a.clear();
  if (n > 0) s.a.emplace_back(0u, static_cast<uint32_t>(n));
  const uint32_t* cp = s.cpts.data();
  const uint8_t* fl = s.flags.data();
  auto run = [&](auto&& m) {
    split_all(s.a, s.b, [&](size_t i, size_t end) { return m(Cursor{cp, fl, end}, i); });
    std::swap(s.a, s.b);
  };
  switch (kind) {
    case PreKind::NumThenGpt2:
      run([](const Cursor& c, size_t i) -> size_t { return c.N(i) ? 1 : 0; });
      run([](const Cursor& c, size_t i) { return match_gpt2(c, i); });
      break;
    case PreKind::Gpt2:
      run([](const Cursor& c, size_t i) { return match_gpt2(c, i); });
      break;
    case PreKind::Llama3:
      run([](const Cursor& c, size_t i) { return match_llama3(c, i, 3); });
      break;
    case PreKind::Qwen2:
      run([](const Cursor& c, size_t i) { return match_llama3(c, i, 1); });
      break;
    case PreKind::Gpt4o:
      run([](const Cursor& c, size_t i) { return match_gpt4o(c, i); });
      break;
  }
  out.clear();
  for (const Range& r : s.a) out.emplace_back(s.offs[r.first], s.offs[r.second]);
}

}  // namespace ls::tok
