// zmm kernels over row-interleaved weights (quant_internal.h IlFormat): one zmm lane per weight
// row of a 16-row group, so each step is one vpdpbusd of 16 rows × 4 codes against 4
// activation bytes broadcast from memory. A tile is 16 weight rows × up to 8 activation rows:
// a block's codes are unpacked once into 8 registers and reused by every activation row.
//
// Kernel BODY, included by kernels_avx512.cpp after its target pragma and rows_driver.h,
// inside namespace ls::quant { namespace { ... } }. Float operations per (row, activation row)
// are exactly those of the scalar reference (interleave.cpp), whatever the tile.

template <GgmlType T>
struct ZIl {
  static constexpr IlFormat F = il_format(T);
  static constexpr bool kBias = !F.min;  // Q4_0/Q5_0/Q8_0: -k·Σq as the initial accumulator
  static constexpr int kMaxR = 8, kHalves = 1, kBlockElems = 32;
  static size_t group_bytes(size_t w_stride, int64_t) { return w_stride * kInterleaveRows; }

  // The 8 steps of one record as unsigned codes (Q8_0: w + 128; IQ4_NL / MXFP4: its table value + 128, the
  // activations' −128·Σq bias making the dot exact: the row kernel's integer per block).
  static void unpack(const uint8_t* rec, __m512i* u) {
    if (F.q8) {
      for (int j = 0; j < 8; ++j)
        u[j] = _mm512_xor_si512(_mm512_loadu_si512(rec + F.qs_off + 64 * j), _mm512_set1_epi8(char(0x80)));
      return;
    }
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int j = 0; j < 4; ++j) {
      const __m512i x = _mm512_loadu_si512(rec + F.qs_off + 64 * j);
      u[j] = _mm512_and_si512(x, m4);
      u[4 + j] = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
    }
    if (F.iq4) {
      const __m128i t = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(nl_table(T))), _mm_set1_epi8(char(0x80)));
      const __m512i tab = _mm512_broadcast_i32x4(t);
      for (int j = 0; j < 8; ++j) u[j] = _mm512_shuffle_epi8(tab, u[j]);
    }
    if (F.q5) {
      const __m512i x10 = _mm512_set1_epi8(0x10);
      for (int j = 0; j < 8; ++j) {
        uint64_t m;
        std::memcpy(&m, rec + F.h_off + 8 * j, 8);
        u[j] = _mm512_mask_add_epi8(u[j], _cvtu64_mask64(m), u[j], x10);
      }
    }
  }

  // Row scales of a record: fp16 d, or MXFP4's E8M0 bytes as 2^(e-128) (e8m0_half_to_f32, denormal for e < 2).
  static __m512 scales(const uint8_t* rec) {
    if (!F.mx) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec)));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, tiny));
  }

  template <int R>
  static void tile(const uint8_t* gp, int, int64_t nb, const ActView& a, int64_t r, float* y, int64_t y_stride,
                   bool prefetch) {
    constexpr ActOrder order = T == GgmlType::Q8_0 ? ActOrder::Natural : ActOrder::PairPerm;  // act_format(T)
    __m512 acc[R];
    const int8_t* aq[R];
    const float* asc[R];
    for (int k = 0; k < R; ++k) {
      acc[k] = _mm512_setzero_ps();
      aq[k] = a.q(r + k);
      asc[k] = a.sc(r + k);
    }
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* rec = gp + size_t(b) * F.rec_bytes;
      if (prefetch) prefetch_ahead(rec, F.rec_bytes);
      __m512i u[8];
      unpack(rec, u);
      const __m512 dw = scales(rec);
      const __m512 mw = F.min ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + F.m_off)))
                              : _mm512_setzero_ps();
#pragma GCC unroll 8
      for (int k = 0; k < R; ++k) {
        const int8_t* q = aq[k];
        // Two independent chains (integer sums are exact in any order).
        __m512i s0 = kBias ? _mm512_set1_epi32(act_bias_of(a, r + k, order, b)) : _mm512_setzero_si512();
        __m512i s1 = _mm512_setzero_si512();
        for (int j = 0; j < 8; j += 2) {
          s0 = _mm512_dpbusd_epi32(s0, u[j], _mm512_set1_epi32(int(load_u32(
                                                 reinterpret_cast<const uint8_t*>(q + act_step_index(order, b, j))))));
          s1 = _mm512_dpbusd_epi32(s1, u[j + 1], _mm512_set1_epi32(int(load_u32(reinterpret_cast<const uint8_t*>(
                                                     q + act_step_index(order, b, j + 1))))));
        }
        const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(asc[k][2 * b]));
        acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), s, acc[k]);
        if (F.min) acc[k] = _mm512_fmadd_ps(mw, _mm512_set1_ps(asc[k][2 * b + 1]), acc[k]);
      }
    }
    for (int k = 0; k < R; ++k) _mm512_storeu_ps(y + (r + k) * y_stride, acc[k]);
  }
};

// Groups [o0/16, o1/16) × activation rows in tiles of up to 8. A group's records (≤ 16 KB for
// n_in ≤ 1536) stay in L1 while the activation tiles stream from L2.
