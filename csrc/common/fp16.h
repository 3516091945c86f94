// Scalar IEEE binary16 conversions (portable; exact widening, round-to-nearest-even narrowing).
// Used where a value must be rounded exactly as an fp16 store would round it.
#pragma once

#include <cstdint>
#include <cstring>

namespace ls {

inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do { mant <<= 1; ++e; } while (!(mant & 0x400));
    bits = sign | uint32_t(112 - e) << 23 | ((mant & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Exact fp16 → fp32 without branches (so the portable loops vectorize): normals and
// infinities/NaNs by rebiasing the exponent with one multiply, subnormals via a magic-number
// subtraction (Maratyszcza's FP16 method). Bit-identical to fp16_to_f32 for every input.
inline float fp16_to_f32_branchless(uint16_t h) {
  const uint32_t w = uint32_t(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  uint32_t bits = (two_w >> 4) + (0xE0u << 23);
  float normalized;
  std::memcpy(&normalized, &bits, 4);
  normalized *= 0x1.0p-112f;
  bits = (two_w >> 17) | (126u << 23);
  float denormalized;
  std::memcpy(&denormalized, &bits, 4);
  denormalized -= 0.5f;
  uint32_t nb, db;
  std::memcpy(&nb, &normalized, 4);
  std::memcpy(&db, &denormalized, 4);
  const uint32_t out = sign | (two_w < (1u << 27) ? db : nb);
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

inline uint16_t f32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  uint32_t ax = x & 0x7fffffff;
  if (ax >= 0x7f800000) return uint16_t(sign | 0x7c00 | (ax > 0x7f800000 ? 0x200 : 0));
  if (ax >= 0x477ff000) return uint16_t(sign | 0x7c00);  // rounds to >= 65520 -> inf
  if (ax < 0x38800000) {  // result subnormal or zero: add via float magic (RNE)
    float a;
    std::memcpy(&a, &ax, 4);
    a += 0.5f;  // 2^-1: ulp of this float is 2^-24 = fp16 subnormal ulp
    uint32_t b;
    std::memcpy(&b, &a, 4);
    return uint16_t(sign | (b - 0x3f000000u));
  }
  const uint32_t mant_odd = (ax >> 13) & 1;
  ax += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return uint16_t(sign | (ax >> 13));
}

inline float fp16_round(float f) { return fp16_to_f32(f32_to_fp16(f)); }

}  // namespace ls
