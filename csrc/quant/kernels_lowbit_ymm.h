// 256-bit row kernels for the low-bit types Q2_K, Q3_K, IQ4_XS (against Q8_K) and IQ4_NL / MXFP4
// (against Q8_0 in PairPerm order). A kernel BODY like kernels_ymm.h (no include guard): each ISA
// file includes it after kernels_ymm.h (for hsum8 / f16), inside namespace ls::quant { namespace {.
//
// Integer sums are exact: maddubs pairs stay below 2^15 (Q2_K/Q3_K codes ≤ 7; IQ4 values are
// applied as |w| × sign-transferred activations, 2·127·127 < 32767), scales enter through madd.
// Numerics (bit-identical to kernels_scalar.cpp on every path): the integer sum of a super-block
// (IQ4_NL: of a block) is reduced to one int32, then acc = fma(float(sumi), d_a·d_w, acc) in
// block order; Q2_K's mins go to accm = fma(float(Σ min·bsum), d_a·dmin_w, accm), out = acc − accm.

inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// Q2_K / Q3_K: 2-bit codes, element 128h+32k+l = bits 2k of qs[32h+l] (one ymm per (h, k)).
// Q3_K runs unsigned u = code + 4 (high bit set ⇒ +4 already) and subtracts 4·Σ scale·bsum.
template <GgmlType T>
struct YLowK {
  static constexpr bool kQ3 = T == GgmlType::Q3_K;
  static constexpr int kB = kQ3 ? 110 : 84;

  template <int R>
  static void dot(const uint8_t* wrow, const ActView& a, int64_t r, float* out) {
    const int64_t nsb = a.n_in / 256;
    float acc[R], accm[R];
    for (int k = 0; k < R; ++k) acc[k] = accm[k] = 0.f;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* blk = wrow + s * kB;
      const uint8_t* qs = kQ3 ? blk + 32 : blk + 16;
      int sc16[16], mn16[16];
      for (int i = 0; i < 16; ++i) {
        sc16[i] = kQ3 ? q3k_scale(blk + 96, i) : blk[i] & 15;
        mn16[i] = kQ3 ? 4 * sc16[i] : blk[i] >> 4;
      }
      const float d = f16(blk + (kQ3 ? 108 : 80)), dmin = kQ3 ? 0.f : f16(blk + 82);
      const __m256i hm = kQ3 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)) : _mm256_setzero_si256();
      __m256i sumi[R];
      for (int k = 0; k < R; ++k) sumi[k] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * h));
        for (int j = 0; j < 4; ++j) {
          __m256i u = _mm256_and_si256(_mm256_srli_epi16(x, 2 * j), m3);
          if (kQ3) {  // bit (4h + j) of hmask[l] → +4
            const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), one);
            u = _mm256_or_si256(u, _mm256_slli_epi16(hb, 2));
          }
          const int sb = 8 * h + 2 * j;  // sub-blocks sb (bytes 0-15) and sb+1 (bytes 16-31)
          const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(short(sc16[sb + 1])), _mm_set1_epi16(short(sc16[sb])));
#pragma GCC unroll 4
          for (int k = 0; k < R; ++k) {
            const __m256i q =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q(r + k) + 256 * s + 128 * h + 32 * j));
            sumi[k] = _mm256_add_epi32(sumi[k], _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), scv));
          }
        }
      }
      for (int k = 0; k < R; ++k) {
        const int16_t* bs = a.bsums(r + k) + 16 * s;
        const float da = a.sc(r + k)[s];
        int summ = 0;
        for (int i = 0; i < 16; ++i) summ += mn16[i] * bs[i];
        const int32_t isum = hsum_i32(sumi[k]) - (kQ3 ? summ : 0);
        acc[k] = std::fma(float(isum), da * d, acc[k]);
        if (!kQ3) accm[k] = std::fma(float(summ), da * dmin, accm[k]);
      }
    }
    for (int k = 0; k < R; ++k) out[k] = acc[k] - accm[k];
  }
};

// Signed int8 values w (IQ4 table lookups) · int8 activations q: Σ over byte pairs as int16
// via maddubs(|w|, sign(q, w)).
inline __m256i iq4_pairs(__m256i w, __m256i q) {
  return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
}
inline __m256i iq4_table(const int8_t* values = kIq4Values) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}

// IQ4_XS against Q8_K: per 32-element sub-block 16 nibble bytes → [low nibbles | high nibbles]
// = elements 0..31 in order, looked up in the table; its signed 6-bit scale enters through madd.
struct YIq4Xs {
  template <int R>
  static void dot(const uint8_t* wrow, const ActView& a, int64_t r, float* out) {
    const int64_t nsb = a.n_in / 256;
    float acc[R] = {};
    const __m256i tab = iq4_table(), m4 = _mm256_set1_epi8(0x0f);
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* blk = wrow + s * 136;
      __m256i sumi[R];
      for (int k = 0; k < R; ++k) sumi[k] = _mm256_setzero_si256();
      for (int ib = 0; ib < 8; ++ib) {
        const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 8 + 16 * ib));
        const __m256i n = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), m4);
        const __m256i w = _mm256_shuffle_epi8(tab, n);
        const __m256i scv = _mm256_set1_epi16(short(iq4xs_scale(blk, ib)));
#pragma GCC unroll 4
        for (int k = 0; k < R; ++k) {
          const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q(r + k) + 256 * s + 32 * ib));
          sumi[k] = _mm256_add_epi32(sumi[k], _mm256_madd_epi16(iq4_pairs(w, q), scv));
        }
      }
      const float d = f16(blk);
      for (int k = 0; k < R; ++k) acc[k] = std::fma(float(hsum_i32(sumi[k])), a.sc(r + k)[s] * d, acc[k]);
    }
    for (int k = 0; k < R; ++k) out[k] = acc[k];
  }
};

// IQ4_NL / MXFP4 against Q8_0 (PairPerm): two blocks per step as [lo nibbles blk0 | lo blk1] and
// [hi blk0 | hi blk1], like YSimple; int32 lanes 0-3 belong to blk0, 4-7 to blk1.
template <GgmlType T>
struct YNl32 {
  static constexpr bool kMx = T == GgmlType::MXFP4;
  static constexpr int kBytes = kMx ? 17 : 18, kQs = kMx ? 1 : 2;  // block bytes, offset of the nibbles
  // Weight scale of the block at p (fp16 → float and E8M0 → float are exact on every path).
  static float scale(const uint8_t* p) { return kMx ? e8m0_half_to_f32(p[0]) : f16(p); }

  template <int R>
  static void dot(const uint8_t* wrow, const ActView& a, int64_t r, float* out) {
    const int64_t nb = a.n_in / 32;
    float acc[R] = {};
    const __m256i tab = iq4_table(nl_table(T)), m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b += 2) {
      const uint8_t* p0 = wrow + b * kBytes;
      const bool two = b + 1 < nb;  // else the second block is the activations' zero pad
      const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + kQs));
      const __m128i q1 = two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + kBytes + kQs)) : _mm_setzero_si128();
      const __m256i x = _mm256_set_m128i(q1, q0);
      const __m256i lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(x, m4));
      const __m256i hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(x, 4), m4));
      const float d0 = scale(p0), d1 = two ? scale(p0 + kBytes) : 0.f;
#pragma GCC unroll 4
      for (int k = 0; k < R; ++k) {
        const int8_t* q = a.q(r + k) + b * 32;
        const float* sc = a.sc(r + k);
        const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
        const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32));
        const __m256i dd = _mm256_add_epi32(_mm256_madd_epi16(iq4_pairs(lo, qa), ones),
                                            _mm256_madd_epi16(iq4_pairs(hi, qb), ones));
        // Lanes 0-3 → s[0], lanes 4-7 → s[1].
        __m128i s = _mm_hadd_epi32(_mm256_castsi256_si128(dd), _mm256_extracti128_si256(dd, 1));
        s = _mm_hadd_epi32(s, s);
        acc[k] = std::fma(float(_mm_cvtsi128_si32(s)), d0 * sc[2 * b], acc[k]);
        if (two) acc[k] = std::fma(float(_mm_extract_epi32(s, 1)), d1 * sc[2 * b + 2], acc[k]);
      }
    }
    for (int k = 0; k < R; ++k) out[k] = acc[k];
  }
};

inline void fill_lowbit_ymm(KernelTable& t) {
  t.rows[slot(GgmlType::Q2_K)] = &run_rows<YLowK<GgmlType::Q2_K>>;
  t.rows[slot(GgmlType::Q3_K)] = &run_rows<YLowK<GgmlType::Q3_K>>;
  t.rows[slot(GgmlType::IQ4_XS)] = &run_rows<YIq4Xs>;
  t.rows[slot(GgmlType::IQ4_NL)] = &run_rows<YNl32<GgmlType::IQ4_NL>>;
  t.rows[slot(GgmlType::MXFP4)] = &run_rows<YNl32<GgmlType::MXFP4>>;
}
