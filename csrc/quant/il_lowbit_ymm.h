// 256-bit kernels over row-interleaved Q2_K / Q3_K records (quant_internal.h KIlFormat): a 16-row group
// is two halves of 8 rows (bytes 32h..32h+31 of every 64-byte record line), one ymm lane per row; tiles
// of 8 weight rows × up to 4 activation rows. Same integer per (row, activation row, super-block) and
// same float operations as il_lowbit_zmm.h, the scalar reference and the row kernels (YLowK).
//
// Kernel BODY: included by kernels_avx2.cpp / kernels_avx_vnni.cpp after il_kquant_ymm.h (uses dot2: with
// maddubs the int16 sums of 4 products stay exact, 4·7·127 < 2^15), inside namespace ls::quant { namespace {.

template <GgmlType T>
struct YLowIl {
  static constexpr KIlFormat F = kil_format(T);
  static constexpr bool kQ3 = T == GgmlType::Q3_K;
  static constexpr int kMaxR = 4, kHalves = 2, kBlockElems = 256;
  static size_t group_bytes(size_t, int64_t n_in) { return size_t(n_in / 256) * size_t(F.rec_bytes); }

  static __m256i b4(const void* q) { return _mm256_set1_epi32(int(load_u32(static_cast<const uint8_t*>(q)))); }
  static __m256i line(const uint8_t* rec, int off, int hf) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + off + 32 * hf));
  }
  // Scale pair p of the half's 8 rows as int16 pairs {sc_2p, sc_2p+1} per lane (Q2_K: scale|min bytes).
  static __m256i pair(const uint8_t* rec, int p, int hf) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + F.sc_off + 32 * p + 16 * hf));
    return kQ3 ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b);
  }

  // Bit n (0..7) of every byte moved to bit 2 (Q3_K: the hmask bit, +4 on the unsigned code).
  static __m256i bit_to_4(__m256i hm, int n) {
    return _mm256_and_si256(n >= 2 ? _mm256_srli_epi16(hm, n - 2) : _mm256_slli_epi16(hm, 2 - n), _mm256_set1_epi8(4));
  }

  template <int R>
  static void tile(const uint8_t* gp, int hf, int64_t nsb, const ActView& a, int64_t r, float* y, int64_t y_stride,
                   bool prefetch) {
    __m256 acc[R], accm[R];  // Q2_K's min terms apart, as in the zmm kernel
    for (int k = 0; k < R; ++k) acc[k] = accm[k] = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i lo16 = _mm256_set1_epi32(kQ3 ? 0xffff : 0x0f), m4 = _mm256_set1_epi32(0x0f);
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* rec = gp + size_t(s) * F.rec_bytes;
      if (prefetch) prefetch_ahead(rec, F.rec_bytes);
      __m256i sumi[R];
      for (int k = 0; k < R; ++k) sumi[k] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        for (int kb = 0; kb < 4; ++kb) {  // sub-blocks 8h+2kb (lines 0-3) and 8h+2kb+1 (lines 4-7)
          __m256i u[8];
          for (int t = 0; t < 8; ++t) {
            u[t] = _mm256_and_si256(_mm256_srli_epi16(line(rec, F.qs_off + (8 * h + t) * 64, hf), 2 * kb), m3);
            if (kQ3) u[t] = _mm256_or_si256(u[t], bit_to_4(line(rec, F.qh_off + t * 64, hf), 4 * h + kb));
          }
          const __m256i pr = pair(rec, 4 * h + kb, hf);
          const __m256i sc0 = _mm256_and_si256(pr, lo16);
          const __m256i sc1 = kQ3 ? _mm256_srli_epi32(pr, 16) : _mm256_and_si256(_mm256_srli_epi32(pr, 16), m4);
          for (int k = 0; k < R; ++k) {
            const int8_t* q = a.q(r + k) + 256 * s + 128 * h + 32 * kb;
            const __m256i z = _mm256_setzero_si256();
            // Four short chains (a single row is latency-bound on chained vpdpbusd).
            const __m256i s0 = _mm256_add_epi32(dot2(z, u[0], b4(q), u[1], b4(q + 4)), dot2(z, u[2], b4(q + 8), u[3], b4(q + 12)));
            const __m256i s1 =
                _mm256_add_epi32(dot2(z, u[4], b4(q + 16), u[5], b4(q + 20)), dot2(z, u[6], b4(q + 24), u[7], b4(q + 28)));
            // |s| < 2^15 and the scale lanes' high halves are 0: one madd per sub-block is the exact product.
            sumi[k] = _mm256_add_epi32(sumi[k], _mm256_add_epi32(_mm256_madd_epi16(s0, sc0), _mm256_madd_epi16(s1, sc1)));
          }
        }
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 16 * hf)));
      const __m256 dmw = kQ3 ? _mm256_setzero_ps() : _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 32 + 16 * hf)));
      for (int k = 0; k < R; ++k) {
        const int16_t* bs = a.bsums(r + k) + 16 * s;
        __m256i corr = _mm256_setzero_si256();  // Q2_K: Σ min·bsum; Q3_K: Σ scale·bsum
        for (int p = 0; p < 8; ++p) {
          const __m256i pr = kQ3 ? pair(rec, p, hf) : _mm256_srli_epi16(pair(rec, p, hf), 4);
          corr = _mm256_add_epi32(corr, _mm256_madd_epi16(pr, b4(bs + 2 * p)));
        }
        const __m256 da = _mm256_set1_ps(a.sc(r + k)[s]);
        if (kQ3) {
          acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[k], _mm256_slli_epi32(corr, 2))),
                                   _mm256_mul_ps(dw, da), acc[k]);
        } else {
          acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[k]), _mm256_mul_ps(dw, da), acc[k]);
          accm[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), _mm256_mul_ps(dmw, da), accm[k]);
        }
      }
    }
    for (int k = 0; k < R; ++k) _mm256_storeu_ps(y + (r + k) * y_stride + 8 * hf, _mm256_sub_ps(acc[k], accm[k]));
  }
};

inline void fill_lowbit_il_ymm(KernelTable& t) {
  t.il_rows[slot(GgmlType::Q2_K)] = &run_il_groups<YLowIl<GgmlType::Q2_K>>;
  t.il_rows[slot(GgmlType::Q3_K)] = &run_il_groups<YLowIl<GgmlType::Q3_K>>;
}
