#include "tokenizer/unicode.h"

#include <array>

namespace ls::tok {

namespace {

struct AsciiFlags {
  std::array<uint8_t, 128> f{};
  AsciiFlags() {
    for (size_t i = 0; i < kCptRangeCount && kCptRanges[i].first < 128; ++i)
      for (uint32_t c = kCptRanges[i].first; c <= kCptRanges[i].last && c < 128; ++c) f[c] = kCptRanges[i].flags;
  }
};

struct ByteMap {
  std::array<uint32_t, 256> to_cpt{};
  std::array<int16_t, 0x100 + 68> from_cpt{};  // -1 = not in the map
  ByteMap() {
    from_cpt.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cpt[b] = self ? static_cast<uint32_t>(b) : next++;
      from_cpt[to_cpt[b]] = static_cast<int16_t>(b);
    }
  }
};

const AsciiFlags& ascii_flags() {
  static const AsciiFlags t;
  return t;
}
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

uint8_t cpt_flags(uint32_t cp) {
  if (cp < 128) return ascii_flags().f[cp];
  size_t lo = 0, hi = kCptRangeCount;
  while (lo < hi) {  // first range with last >= cp
    const size_t mid = (lo + hi) / 2;
    if (kCptRanges[mid].last < cp) lo = mid + 1; else hi = mid;
  }
  return (lo < kCptRangeCount && kCptRanges[lo].first <= cp) ? kCptRanges[lo].flags : 0;
}

uint32_t gpt2_byte_to_cpt(uint8_t b) { return byte_map().to_cpt[b]; }

int gpt2_cpt_to_byte(uint32_t cp) {
  return cp < byte_map().from_cpt.size() ? byte_map().from_cpt[cp] : -1;
}

}  // namespace ls::tok
