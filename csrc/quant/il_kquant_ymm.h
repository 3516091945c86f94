// 256-bit kernels over row-interleaved Q4_K / Q5_K / Q6_K / IQ4_XS records (quant_internal.h KIlFormat): a
// 16-row group is two halves of 8 rows (bytes 32h..32h+31 of every 64-byte record line), one
// ymm lane per row; tiles of 8 weight rows × up to 4 activation rows. Same integer sums and float
// operations as the scalar reference (interleave.cpp kil_rows_scalar) and il_kquant_zmm.h.
//
// Kernel BODY: included by kernels_avx2.cpp / kernels_avx_vnni.cpp after il_ymm.h (uses dot2:
// with maddubs the int16 pair sums stay exact, 4 products ≤ 4·63·127 < 32768), inside
// namespace ls::quant { namespace { ... } }.

template <GgmlType T>
struct YKIl {
  static constexpr KIlFormat F = kil_format(T);
  static constexpr int kMaxR = 4, kHalves = 2, kBlockElems = 256;
  static size_t group_bytes(size_t, int64_t n_in) { return size_t(n_in / 256) * size_t(F.rec_bytes); }

  static __m256i b4(const int8_t* q) { return _mm256_set1_epi32(int(load_u32(reinterpret_cast<const uint8_t*>(q)))); }
  static __m256i line(const uint8_t* rec, int off, int h) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + off + 32 * h));
  }
  static __m128i half16(const uint8_t* rec, int off, int h) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + off + 16 * h));
  }

  template <int R>
  static void tile(const uint8_t* gp, int h, int64_t nsb, const ActView& a, int64_t r, float* y, int64_t y_stride,
                   bool prefetch) {
    __m256 acc[R], accm[R];  // Q4_K's min terms apart, as in the zmm kernel
    for (int k = 0; k < R; ++k) acc[k] = accm[k] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* rec = gp + size_t(s) * F.rec_bytes;
      if (prefetch) prefetch_ahead(rec, F.rec_bytes);
      __m256i sumi[R];
      for (int k = 0; k < R; ++k) sumi[k] = _mm256_setzero_si256();
      const __m256 dw = _mm256_cvtph_ps(half16(rec, 0, h));
      if (T == GgmlType::IQ4_XS) {
        // Signed table values as |w| × sign(q, w), one madd per step (pair sums 2·127·127 < 2^15), on
        // every path: the same instructions with or without VNNI.
        const __m256i tab = iq4_table(), ones = _mm256_set1_epi16(1);
        for (int j = 0; j < 8; ++j) {
          const __m256i scj = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec + F.sc_off + 16 * j + 8 * h)));
          __m256i u[8];  // u[t]: elements 32j+4t..+3 (t < 4: low nibbles, else high nibbles of line t−4)
          for (int t = 0; t < 4; ++t) {
            const __m256i x = line(rec, F.qs_off + (4 * j + t) * 64, h);
            u[t] = _mm256_shuffle_epi8(tab, _mm256_and_si256(x, m4));
            u[4 + t] = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(x, 4), m4));
          }
          for (int k = 0; k < R; ++k) {
            const int8_t* q = a.q(r + k) + 256 * s + 32 * j;
            __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
            for (int t = 0; t < 8; t += 2) {
              s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(iq4_pairs(u[t], b4(q + 4 * t)), ones));
              s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(iq4_pairs(u[t + 1], b4(q + 4 * t + 4)), ones));
            }
            sumi[k] = _mm256_add_epi32(sumi[k], _mm256_mullo_epi32(_mm256_add_epi32(s0, s1), scj));
          }
        }
        for (int k = 0; k < R; ++k)
          acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[k]), _mm256_mul_ps(dw, _mm256_set1_ps(a.sc(r + k)[s])), acc[k]);
      } else if (T != GgmlType::Q6_K) {  // Q4_K, Q5_K
        for (int j = 0; j < 8; ++j) {
          const __m256i scj = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec + F.sc_off + 16 * j + 8 * h)));
          __m256i u[8];
          for (int t = 0; t < 8; ++t) {
            const __m256i x = line(rec, F.qs_off + (8 * (j / 2) + t) * 64, h);
            u[t] = _mm256_and_si256((j & 1) ? _mm256_srli_epi16(x, 4) : x, m4);
            if (T == GgmlType::Q5_K) {  // bit j of each qh byte → bit 4 of the code
              const __m256i qh = line(rec, F.qh_off + t * 64, h);
              u[t] = _mm256_or_si256(u[t], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, j), _mm256_set1_epi8(1)), 4));
            }
          }
          for (int k = 0; k < R; ++k) {
            const int8_t* q = a.q(r + k) + 256 * s + 32 * j;
            __m256i s0 = dot2(_mm256_setzero_si256(), u[0], b4(q), u[1], b4(q + 4));
            __m256i s1 = dot2(_mm256_setzero_si256(), u[2], b4(q + 8), u[3], b4(q + 12));
            s0 = dot2(s0, u[4], b4(q + 16), u[5], b4(q + 20));
            s1 = dot2(s1, u[6], b4(q + 24), u[7], b4(q + 28));
            sumi[k] = _mm256_add_epi32(sumi[k], _mm256_mullo_epi32(_mm256_add_epi32(s0, s1), scj));
          }
        }
        const __m256 dmw = _mm256_cvtph_ps(half16(rec, 32, h));
        for (int k = 0; k < R; ++k) {
          const int16_t* bs = a.bsums(r + k) + 16 * s;
          __m256i summ = _mm256_setzero_si256();
          for (int p = 0; p < 4; ++p) {
            const int lo = bs[4 * p] + bs[4 * p + 1], hi = bs[4 * p + 2] + bs[4 * p + 3];
            const __m256i mp = _mm256_cvtepu8_epi16(half16(rec, F.m_off + 32 * p, h));
            summ = _mm256_add_epi32(summ, _mm256_madd_epi16(mp, _mm256_set1_epi32(int(uint32_t(uint16_t(lo)) | (uint32_t(hi) << 16)))));
          }
          const __m256 da = _mm256_set1_ps(a.sc(r + k)[s]);
          acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[k]), _mm256_mul_ps(dw, da), acc[k]);
          accm[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_mul_ps(dmw, da), accm[k]);
        }
      } else {
        const __m256i m30 = _mm256_set1_epi8(0x30);
        for (int hb = 0; hb < 2; ++hb) {
          for (int sp = 0; sp < 8; ++sp) {
            const int sb = 8 * hb + sp;
            const __m256i pr = _mm256_cvtepi8_epi16(half16(rec, F.sc_off + 32 * (sb / 2), h));
            const __m256i scv = (sb & 1) ? _mm256_srai_epi32(pr, 16) : _mm256_srai_epi32(_mm256_slli_epi32(pr, 16), 16);
            __m256i u[4];
            for (int k = 0; k < 4; ++k) {
              const int E = 4 * sp + k;
              const __m256i ql = line(rec, F.qs_off + (16 * hb + (E < 16 ? E : E - 16)) * 64, h);
              const __m256i qh = line(rec, F.qh_off + (8 * hb + (E & 7)) * 64, h);
              const __m256i lo = E < 16 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
              __m256i hi;
              switch (E >> 3) {
                case 0: hi = _mm256_slli_epi16(qh, 4); break;
                case 1: hi = _mm256_slli_epi16(qh, 2); break;
                case 2: hi = qh; break;
                default: hi = _mm256_srli_epi16(qh, 2); break;
              }
              u[k] = _mm256_or_si256(lo, _mm256_and_si256(hi, m30));
            }
            for (int k = 0; k < R; ++k) {
              const int8_t* q = a.q(r + k) + 256 * s + 128 * hb + 16 * sp;
              __m256i s0 = dot2(_mm256_setzero_si256(), u[0], b4(q), u[1], b4(q + 4));
              s0 = dot2(s0, u[2], b4(q + 8), u[3], b4(q + 12));
              sumi[k] = _mm256_add_epi32(sumi[k], _mm256_mullo_epi32(s0, scv));
            }
          }
        }
        for (int k = 0; k < R; ++k) {
          const int16_t* bs = a.bsums(r + k) + 16 * s;
          __m256i corr = _mm256_setzero_si256();
          for (int p = 0; p < 8; ++p) {
            const __m256i pr = _mm256_cvtepi8_epi16(half16(rec, F.sc_off + 32 * p, h));
            corr = _mm256_add_epi32(
                corr, _mm256_madd_epi16(pr, _mm256_set1_epi32(int(load_u32(reinterpret_cast<const uint8_t*>(bs + 2 * p))))));
          }
          sumi[k] = _mm256_sub_epi32(sumi[k], _mm256_slli_epi32(corr, 5));
          acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[k]), _mm256_mul_ps(dw, _mm256_set1_ps(a.sc(r + k)[s])), acc[k]);
        }
      }
    }
    for (int k = 0; k < R; ++k) _mm256_storeu_ps(y + (r + k) * y_stride + 8 * h, _mm256_sub_ps(acc[k], accm[k]));
  }
};


inline void fill_kil_ymm(KernelTable& t) {
  t.il_rows[slot(GgmlType::Q4_K)] = &run_il_groups<YKIl<GgmlType::Q4_K>>;
  t.il_rows[slot(GgmlType::Q5_K)] = &run_il_groups<YKIl<GgmlType::Q5_K>>;
  t.il_rows[slot(GgmlType::Q6_K)] = &run_il_groups<YKIl<GgmlType::Q6_K>>;
  t.il_rows[slot(GgmlType::IQ4_XS)] = &run_il_groups<YKIl<GgmlType::IQ4_XS>>;
}
