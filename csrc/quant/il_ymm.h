// 256-bit kernels over row-interleaved weights (quant_internal.h IlFormat): a 16-row group is
// two halves of 8 rows, one ymm lane per row; tiles of 8 weight rows × up to 4 activation
// rows (16 ymm registers). Same float operations per (row, activation row) as the scalar
// reference (interleave.cpp), so every path gives bit-identical results.
//
// Kernel BODY: included by kernels_avx2.cpp / kernels_avx_vnni.cpp right after kernels_ymm.h
// (uses LS_VNNI, ls_dpbusd, dot2, bits_to_0x10), inside namespace ls::quant { namespace { } }.

template <GgmlType T>
struct YIl {
  static constexpr IlFormat F = il_format(T);
  static constexpr ActOrder kOrder = T == GgmlType::Q8_0 ? ActOrder::Natural : ActOrder::PairPerm;
  // Without VNNI, Q8_0 uses |w| × sign(a, w) (no bias); otherwise unsigned codes + act bias.
  // IQ4_NL / MXFP4 always run |w| × sign(a, w), VNNI or not (its activations' −128·Σq bias serves the zmm kernel).
  static constexpr bool kSignTrick = (F.q8 && !LS_VNNI) || F.iq4;
  static constexpr bool kBias = !F.min && !kSignTrick;
  static constexpr int kMaxR = 4, kHalves = 2, kBlockElems = 32;
  static size_t group_bytes(size_t w_stride, int64_t) { return w_stride * kInterleaveRows; }

  static __m256i act4(const int8_t* q, int64_t b, int j) {
    return _mm256_set1_epi32(int(load_u32(reinterpret_cast<const uint8_t*>(q + act_step_index(kOrder, b, j)))));
  }

  // Codes of half h of a record: u[j] for the 8 steps (Q8_0: w + 128, or |w| with kSignTrick;
  // IQ4_NL: the signed table value).
  static void unpack(const uint8_t* rec, int h, __m256i* u) {
    const uint8_t* qs = rec + F.qs_off + 32 * h;
    if (F.q8) {
      for (int j = 0; j < 8; ++j) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * j));
        u[j] = kSignTrick ? _mm256_sign_epi8(w, w) : _mm256_xor_si256(w, _mm256_set1_epi8(char(0x80)));
      }
      return;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int j = 0; j < 4; ++j) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * j));
      u[j] = _mm256_and_si256(x, m4);
      u[4 + j] = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
    }
    if (F.iq4) {
      const __m256i tab = iq4_table(nl_table(T));
      for (int j = 0; j < 8; ++j) u[j] = _mm256_shuffle_epi8(tab, u[j]);
    }
    if (F.q5) {
      for (int j = 0; j < 8; ++j) u[j] = _mm256_or_si256(u[j], bits_to_0x10(load_u32(rec + F.h_off + 8 * j + 4 * h)));
    }
  }

  // Row scales of half h of a record: fp16 d, or MXFP4's E8M0 bytes (as il_zmm.h's ZIl::scales).
  static __m256 scales(const uint8_t* rec, int h) {
    if (!F.mx) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 16 * h)));
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec + 8 * h)));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
  }

  template <int R>
  static void tile(const uint8_t* gp, int h, int64_t nb, const ActView& a, int64_t r, float* y, int64_t y_stride,
                   bool prefetch) {
    __m256 acc[R];
    const int8_t* aq[R];
    const float* asc[R];
    for (int k = 0; k < R; ++k) {
      acc[k] = _mm256_setzero_ps();
      aq[k] = a.q(r + k);
      asc[k] = a.sc(r + k);
    }
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* rec = gp + size_t(b) * F.rec_bytes;
      if (prefetch) prefetch_ahead(rec, F.rec_bytes);
      __m256i u[8];
      unpack(rec, h, u);
      const __m256 dw = scales(rec, h);
      const __m256 mw = F.min ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + F.m_off + 16 * h)))
                              : _mm256_setzero_ps();
#pragma GCC unroll 4
      for (int k = 0; k < R; ++k) {
        const int8_t* q = aq[k];
        __m256i s0 = kBias ? _mm256_set1_epi32(act_bias_of(a, r + k, kOrder, b)) : _mm256_setzero_si256();
        __m256i s1 = _mm256_setzero_si256();
        if (F.iq4) {  // |value| × sign-transferred activations: pair sums < 2^15
          for (int j = 0; j < 8; ++j) {
            const __m256i p = _mm256_madd_epi16(iq4_pairs(u[j], act4(q, b, j)), _mm256_set1_epi16(1));
            if (j & 1) s1 = _mm256_add_epi32(s1, p);
            else s0 = _mm256_add_epi32(s0, p);
          }
        } else if (kSignTrick) {
          const uint8_t* qs = rec + F.qs_off + 32 * h;
          for (int j = 0; j < 8; ++j) {
            const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * j));
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u[j], _mm256_sign_epi8(act4(q, b, j), w)),
                                                _mm256_set1_epi16(1));
            if (j & 1) s1 = _mm256_add_epi32(s1, p);
            else s0 = _mm256_add_epi32(s0, p);
          }
        } else {
          // Codes ≤ 31 (or VNNI): two steps per int16 pair sum stay exact.
          s0 = dot2(s0, u[0], act4(q, b, 0), u[1], act4(q, b, 1));
          s1 = dot2(s1, u[2], act4(q, b, 2), u[3], act4(q, b, 3));
          s0 = dot2(s0, u[4], act4(q, b, 4), u[5], act4(q, b, 5));
          s1 = dot2(s1, u[6], act4(q, b, 6), u[7], act4(q, b, 7));
        }
        const __m256 s = _mm256_mul_ps(dw, _mm256_set1_ps(asc[k][2 * b]));
        acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), s, acc[k]);
        if (F.min) acc[k] = _mm256_fmadd_ps(mw, _mm256_set1_ps(asc[k][2 * b + 1]), acc[k]);
      }
    }
    for (int k = 0; k < R; ++k) _mm256_storeu_ps(y + (r + k) * y_stride + 8 * h, acc[k]);
  }
};


inline void fill_il_ymm(KernelTable& t) {
  t.il_rows[slot(GgmlType::Q8_0)] = &run_il_groups<YIl<GgmlType::Q8_0>>;
  t.il_rows[slot(GgmlType::Q4_0)] = &run_il_groups<YIl<GgmlType::Q4_0>>;
  t.il_rows[slot(GgmlType::Q4_1)] = &run_il_groups<YIl<GgmlType::Q4_1>>;
  t.il_rows[slot(GgmlType::Q5_0)] = &run_il_groups<YIl<GgmlType::Q5_0>>;
  t.il_rows[slot(GgmlType::Q5_1)] = &run_il_groups<YIl<GgmlType::Q5_1>>;
  t.il_rows[slot(GgmlType::IQ4_NL)] = &run_il_groups<YIl<GgmlType::IQ4_NL>>;
  t.il_rows[slot(GgmlType::MXFP4)] = &run_il_groups<YIl<GgmlType::MXFP4>>;
}
