// zmm kernels over row-interleaved Q4_K / Q5_K / Q6_K / IQ4_XS records (quant_internal.h KIlFormat) against Q8_K
// activations: one lane per weight row, tiles of 16 weight rows × up to 8 activation rows. Per
// sub-block an exact int32 dot (vpdpbusd of 4 broadcast activation bytes), times the row's
// scale (vpmulld), summed over the super-block; mins (Q4_K, Q5_K) and Q6_K's −32 go through the
// activation block sums with vpdpwssd. Float operations are those of the scalar reference
// (interleave.cpp kil_rows_scalar).
//
// Kernel BODY, included by kernels_avx512.cpp after il_zmm.h (uses run_il's conventions),
// inside namespace ls::quant { namespace { ... } }.

template <GgmlType T>
struct ZKIl {
  static constexpr KIlFormat F = kil_format(T);
  static constexpr int kMaxR = 8, kHalves = 1, kBlockElems = 256;
  static size_t group_bytes(size_t, int64_t n_in) { return size_t(n_in / 256) * size_t(F.rec_bytes); }

  static __m512i bcast4(const int8_t* q) { return _mm512_set1_epi32(int(load_u32(reinterpret_cast<const uint8_t*>(q)))); }

  // Q6_K's 6-bit codes of element step E (0..31) of half h (quant_internal.h KIlFormat).
  static __m512i q6_code(const uint8_t* rec, int h, int E) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i ql = _mm512_loadu_si512(rec + F.qs_off + (16 * h + (E < 16 ? E : E - 16)) * 64);
    const __m512i qh = _mm512_loadu_si512(rec + F.qh_off + (8 * h + (E & 7)) * 64);
    const __m512i lo = E < 16 ? _mm512_and_si512(ql, m4) : _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4);
    __m512i hi;
    switch (E >> 3) {
      case 0: hi = _mm512_slli_epi16(qh, 4); break;
      case 1: hi = _mm512_slli_epi16(qh, 2); break;
      case 2: hi = qh; break;
      default: hi = _mm512_srli_epi16(qh, 2); break;
    }
    return _mm512_or_si512(lo, _mm512_and_si512(hi, m30));
  }
  // Q6_K codes of element steps E0..E0+3 of half h (E0 a multiple of 4).
  static void q6_codes(const uint8_t* rec, int h, int E0, __m512i* u) {
    for (int k = 0; k < 4; ++k) u[k] = q6_code(rec, h, E0 + k);
  }

  template <int R>
  static void tile(const uint8_t* gp, int, int64_t nsb, const ActView& a, int64_t r, float* y, int64_t y_stride,
                   bool prefetch) {
    // Q4_K's / Q5_K's min terms get their own accumulator, subtracted at the end: the operation order
    // of llama.cpp's repacked Q4_K GEMM (its int sums are exact, so only the float order matters).
    __m512 acc[R], accm[R];
    for (int k = 0; k < R; ++k) acc[k] = accm[k] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* rec = gp + size_t(s) * F.rec_bytes;
      if (prefetch) prefetch_ahead(rec, F.rec_bytes);
      __m512i sumi[R];
      for (int k = 0; k < R; ++k) sumi[k] = _mm512_setzero_si512();
      if (T == GgmlType::IQ4_XS) {
        // Table value + 128 (unsigned) per nibble; the dot of sub-block j starts at −128·Σq (two bsums), so
        // it is the row kernel's exact int32, then times the signed scale (vpmulld).
        const __m128i t16 = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values)), _mm_set1_epi8(char(0x80)));
        const __m512i tab = _mm512_broadcast_i32x4(t16), m4 = _mm512_set1_epi8(0x0f);
        for (int j = 0; j < 8; ++j) {
          const __m512i scj = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + F.sc_off + 16 * j)));
          __m512i u[8];  // u[t]: elements 32j+4t..+3 (t < 4: low nibbles, else high nibbles of line t−4)
          for (int t = 0; t < 4; ++t) {
            const __m512i x = _mm512_loadu_si512(rec + F.qs_off + (4 * j + t) * 64);
            u[t] = _mm512_shuffle_epi8(tab, _mm512_and_si512(x, m4));
            u[4 + t] = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(x, 4), m4));
          }
#pragma GCC unroll 8
          for (int k = 0; k < R; ++k) {
            const int8_t* q = a.q(r + k) + 256 * s + 32 * j;
            const int16_t* bs = a.bsums(r + k) + 16 * s + 2 * j;
            __m512i s0 = _mm512_set1_epi32(-128 * (int(bs[0]) + int(bs[1]))), s1 = _mm512_setzero_si512();
            for (int t = 0; t < 8; t += 2) {
              s0 = _mm512_dpbusd_epi32(s0, u[t], bcast4(q + 4 * t));
              s1 = _mm512_dpbusd_epi32(s1, u[t + 1], bcast4(q + 4 * t + 4));
            }
            sumi[k] = _mm512_add_epi32(sumi[k], _mm512_mullo_epi32(_mm512_add_epi32(s0, s1), scj));
          }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
        for (int k = 0; k < R; ++k)
          acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[k]), _mm512_mul_ps(dw, _mm512_set1_ps(a.sc(r + k)[s])), acc[k]);
      } else if (T != GgmlType::Q6_K) {  // Q4_K, Q5_K
        const __m512i m4 = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
        for (int j = 0; j < 8; ++j) {  // sub-block j = chunk j/2, low (even j) or high nibbles
          const __m512i scj = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + F.sc_off + 16 * j)));
          __m512i u[8];
          for (int t = 0; t < 8; ++t) {
            const __m512i x = _mm512_loadu_si512(rec + F.qs_off + (8 * (j / 2) + t) * 64);
            u[t] = _mm512_and_si512((j & 1) ? _mm512_srli_epi16(x, 4) : x, m4);
            if (T == GgmlType::Q5_K) {  // bit j of each qh byte → bit 4 of the code
              const __m512i qh = _mm512_loadu_si512(rec + F.qh_off + t * 64);
              u[t] = _mm512_or_si512(u[t], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, j), one), 4));
            }
          }
#pragma GCC unroll 8
          for (int k = 0; k < R; ++k) {
            const int8_t* q = a.q(r + k) + 256 * s + 32 * j;
            __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
            for (int t = 0; t < 8; t += 2) {
              s0 = _mm512_dpbusd_epi32(s0, u[t], bcast4(q + 4 * t));
              s1 = _mm512_dpbusd_epi32(s1, u[t + 1], bcast4(q + 4 * t + 4));
            }
            sumi[k] = _mm512_add_epi32(sumi[k], _mm512_mullo_epi32(_mm512_add_epi32(s0, s1), scj));
          }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
        const __m512 dmw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32)));
        __m512i mp[4];
        for (int p = 0; p < 4; ++p)
          mp[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + F.m_off + 32 * p)));
        for (int k = 0; k < R; ++k) {
          const int16_t* bs = a.bsums(r + k) + 16 * s;
          __m512i summ = _mm512_setzero_si512();
          for (int p = 0; p < 4; ++p) {
            const int lo = bs[4 * p] + bs[4 * p + 1], hi = bs[4 * p + 2] + bs[4 * p + 3];  // |.| ≤ 8128
            summ = _mm512_dpwssd_epi32(summ, mp[p], _mm512_set1_epi32(int(uint32_t(uint16_t(lo)) | (uint32_t(hi) << 16))));
          }
          const __m512 da = _mm512_set1_ps(a.sc(r + k)[s]);
          acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[k]), _mm512_mul_ps(dw, da), acc[k]);
          accm[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(dmw, da), accm[k]);
        }
      } else {
        for (int h = 0; h < 2; ++h) {
          for (int sp = 0; sp < 8; ++sp) {  // 16-element sub-block 8h+sp = element steps 4sp..4sp+3
            const int sb = 8 * h + sp;
            const __m512i pr =
                _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + F.sc_off + 32 * (sb / 2))));
            const __m512i scv = (sb & 1) ? _mm512_srai_epi32(pr, 16) : _mm512_srai_epi32(_mm512_slli_epi32(pr, 16), 16);
            __m512i u[4];
            q6_codes(rec, h, 4 * sp, u);
#pragma GCC unroll 8
            for (int k = 0; k < R; ++k) {
              const int8_t* q = a.q(r + k) + 256 * s + 128 * h + 16 * sp;
              __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[0], bcast4(q));
              __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[1], bcast4(q + 4));
              s0 = _mm512_dpbusd_epi32(s0, u[2], bcast4(q + 8));
              s1 = _mm512_dpbusd_epi32(s1, u[3], bcast4(q + 12));
              sumi[k] = _mm512_add_epi32(sumi[k], _mm512_mullo_epi32(_mm512_add_epi32(s0, s1), scv));
            }
          }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
        for (int k = 0; k < R; ++k) {
          const int16_t* bs = a.bsums(r + k) + 16 * s;
          __m512i corr = _mm512_setzero_si512();  // Σ scale·bsum per row
          for (int p = 0; p < 8; ++p) {
            const __m512i pr =
                _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + F.sc_off + 32 * p)));
            corr = _mm512_dpwssd_epi32(corr, pr, _mm512_set1_epi32(int(load_u32(reinterpret_cast<const uint8_t*>(bs + 2 * p)))));
          }
          sumi[k] = _mm512_sub_epi32(sumi[k], _mm512_slli_epi32(corr, 5));
          acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[k]), _mm512_mul_ps(dw, _mm512_set1_ps(a.sc(r + k)[s])), acc[k]);
        }
      }
    }
    for (int k = 0; k < R; ++k) _mm512_storeu_ps(y + (r + k) * y_stride, _mm512_sub_ps(acc[k], accm[k]));
  }
};

