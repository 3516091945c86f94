// zmm kernels over row-interleaved Q2_K / Q3_K records (quant_internal.h KIlFormat) against Q8_K
// activations: one lane per weight row, tiles of 16 weight rows × up to 8 activation rows. A record line
// (64 bytes, 16 rows × 4 bytes) holds four steps of 2-bit codes (bit pairs k = 0..3); per 16-element
// sub-block one exact int32 dot (4 vpdpbusd of unsigned codes ≤ 7 against 4 broadcast activation bytes,
// |dot| ≤ 16·7·127 < 2^15), times the row's scale with vpdpwssd (the dot and the scale each fit the low
// int16 of their lane; the high halves of the scale lanes are 0). Q2_K's mins and Q3_K's −4 go through
// the activation block sums with vpdpwssd. Each (row, activation row, super-block) integer is the row
// kernels' own, and the float operations are theirs (kernels_lowbit_ymm.h YLowK), so the interleaved and
// row layouts give the same bits.
//
// Kernel BODY, included by kernels_avx512.cpp after il_kquant_zmm.h, inside namespace ls::quant { namespace {.

template <GgmlType T>
struct ZLowIl {
  static constexpr KIlFormat F = kil_format(T);
  static constexpr bool kQ3 = T == GgmlType::Q3_K;
  static constexpr int kMaxR = 8, kHalves = 1, kBlockElems = 256;
  static size_t group_bytes(size_t, int64_t n_in) { return size_t(n_in / 256) * size_t(F.rec_bytes); }

  static __m512i bcast4(const int8_t* q) { return _mm512_set1_epi32(int(load_u32(reinterpret_cast<const uint8_t*>(q)))); }
  static __m512i bcast_pair(const int16_t* bs) { return _mm512_set1_epi32(int(load_u32(reinterpret_cast<const uint8_t*>(bs)))); }
  // Scale pair p of the 16 rows as int16 pairs {sc_2p, sc_2p+1} per lane (Q2_K: the packed scale|min bytes).
  static __m512i pair(const uint8_t* rec, int p) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + F.sc_off + 32 * p));
    return kQ3 ? _mm512_cvtepi8_epi16(b) : _mm512_cvtepu8_epi16(b);
  }

  // Bit n (0..7) of every byte moved to bit 2 (Q3_K: the hmask bit, +4 on the unsigned code).
  static __m512i bit_to_4(__m512i hm, int n) {
    return _mm512_and_si512(n >= 2 ? _mm512_srli_epi16(hm, n - 2) : _mm512_slli_epi16(hm, 2 - n), _mm512_set1_epi8(4));
  }

  template <int R>
  static void tile(const uint8_t* gp, int, int64_t nsb, const ActView& a, int64_t r, float* y, int64_t y_stride,
                   bool prefetch) {
    __m512 acc[R], accm[R];  // Q2_K's min terms apart, subtracted at the end (the row kernels' order)
    for (int k = 0; k < R; ++k) acc[k] = accm[k] = _mm512_setzero_ps();
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m512i lo16 = _mm512_set1_epi32(kQ3 ? 0xffff : 0x0f), m4 = _mm512_set1_epi32(0x0f);
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* rec = gp + size_t(s) * F.rec_bytes;
      if (prefetch) prefetch_ahead(rec, F.rec_bytes);
      __m512i sumi[R];
      for (int k = 0; k < R; ++k) sumi[k] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        for (int kb = 0; kb < 4; ++kb) {  // sub-blocks 8h+2kb (lines 0-3) and 8h+2kb+1 (lines 4-7)
          __m512i u[8];
          for (int t = 0; t < 8; ++t) {
            const __m512i x = _mm512_loadu_si512(rec + F.qs_off + (8 * h + t) * 64);
            u[t] = _mm512_and_si512(_mm512_srli_epi16(x, 2 * kb), m3);
            if (kQ3) u[t] = _mm512_or_si512(u[t], bit_to_4(_mm512_loadu_si512(rec + F.qh_off + t * 64), 4 * h + kb));
          }
          const __m512i pr = pair(rec, 4 * h + kb);
          const __m512i sc0 = _mm512_and_si512(pr, lo16);
          const __m512i sc1 = kQ3 ? _mm512_srli_epi32(pr, 16) : _mm512_and_si512(_mm512_srli_epi32(pr, 16), m4);
#pragma GCC unroll 8
          for (int k = 0; k < R; ++k) {
            const int8_t* q = a.q(r + k) + 256 * s + 128 * h + 32 * kb;
            __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[0], bcast4(q));
            __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[4], bcast4(q + 16));
            for (int t = 1; t < 4; ++t) {
              s0 = _mm512_dpbusd_epi32(s0, u[t], bcast4(q + 4 * t));
              s1 = _mm512_dpbusd_epi32(s1, u[4 + t], bcast4(q + 16 + 4 * t));
            }
            sumi[k] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(sumi[k], s0, sc0), s1, sc1);
          }
        }
      }
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
      const __m512 dmw = kQ3 ? _mm512_setzero_ps() : _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32)));
      for (int k = 0; k < R; ++k) {
        const int16_t* bs = a.bsums(r + k) + 16 * s;
        __m512i corr = _mm512_setzero_si512();  // Q2_K: Σ min·bsum; Q3_K: Σ scale·bsum
        for (int p = 0; p < 8; ++p) {
          const __m512i pr = kQ3 ? pair(rec, p) : _mm512_srli_epi16(pair(rec, p), 4);
          corr = _mm512_dpwssd_epi32(corr, pr, bcast_pair(bs + 2 * p));
        }
        const __m512 da = _mm512_set1_ps(a.sc(r + k)[s]);
        if (kQ3) {
          acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sumi[k], _mm512_slli_epi32(corr, 2))),
                                   _mm512_mul_ps(dw, da), acc[k]);
        } else {
          acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[k]), _mm512_mul_ps(dw, da), acc[k]);
          accm[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(corr), _mm512_mul_ps(dmw, da), accm[k]);
        }
      }
    }
    for (int k = 0; k < R; ++k) _mm512_storeu_ps(y + (r + k) * y_stride, _mm512_sub_ps(acc[k], accm[k]));
  }
};
