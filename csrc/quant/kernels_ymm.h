// 256-bit kernels for every weight type, compiled three times: kernels_avx2.cpp (maddubs +
// madd), kernels_avx_vnni.cpp (VEX vpdpbusd) and kernels_avx512.cpp (EVEX vpdpbusd on ymm,
// for the types without a zmm kernel). The including file defines, after its target pragma:
//   LS_VNNI          0 or 1
//   ls_dpbusd(acc, u, s)  acc + Σ4 u8*s8 per int32 lane (only when LS_VNNI)
// and includes this inside namespace ls::quant { namespace { ... } }.
//
// Named .h (not .inc) so the build's header-change check recompiles its includers. It is a
// kernel BODY, not a normal header: no include guard, included inside an anonymous namespace.
//
// Integer results are exact on every path (maddubs never saturates here: codes are ≤ 63 or,
// for Q8_0 on AVX2, |w| ≤ 128 against |a| ≤ 127), so paths differ only in float order.

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float f16(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }

// acc + Σ u1*s1 + Σ u2*s2 per int32 lane; the two-product int16 sum stays < 32767 for codes ≤ 31.
inline __m256i dot2(__m256i acc, __m256i u1, __m256i s1, __m256i u2, __m256i s2) {
#if LS_VNNI
  return ls_dpbusd(ls_dpbusd(acc, u1, s1), u2, s2);
#else
  const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(u1, s1), _mm256_maddubs_epi16(u2, s2));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
}

// Byte j of the result is 0x10 when bit j of m is set (Q5 fifth bit).
inline __m256i bits_to_0x10(uint32_t m) {
  const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3,
                                        3, 3, 3, 3, 3);
  const __m256i sel = _mm256_set1_epi64x(0x8040201008040201LL);
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(int(m)), shuf), sel);
  return _mm256_and_si256(_mm256_cmpeq_epi8(v, sel), _mm256_set1_epi8(0x10));
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1 against Q8_0/Q8_1 in PairPerm order: two weight blocks per step,
// ymm [lo nibbles blk0 | lo blk1] and [hi blk0 | hi blk1]; int32 lanes 0-3 = blk0, 4-7 = blk1.
template <GgmlType T>
struct YSimple {
  static constexpr int kB = T == GgmlType::Q4_0 ? 18 : T == GgmlType::Q4_1 ? 20 : T == GgmlType::Q5_0 ? 22 : 24;
  static constexpr bool kMin = T == GgmlType::Q4_1 || T == GgmlType::Q5_1;
  static constexpr bool kQ5 = T == GgmlType::Q5_0 || T == GgmlType::Q5_1;
  static constexpr bool kBias = !kMin;  // u = code + 8/16: initial accumulator from the act bias
  static constexpr int kQs = kQ5 ? (kMin ? 8 : 6) : (kMin ? 4 : 2);

  // Codes of blocks p0 and p1 (p1 == nullptr: zero block) as [lo0 | lo1] and [hi0 | hi1].
  static void unpack(const uint8_t* p0, const uint8_t* p1, __m256i& lo, __m256i& hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + kQs));
    const __m128i q1 = p1 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + kQs)) : _mm_setzero_si128();
    const __m256i x = _mm256_set_m128i(q1, q0);
    lo = _mm256_and_si256(x, m4);
    hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
    if (kQ5) {
      const uint32_t h0 = load_u32(p0 + (kMin ? 4 : 2));
      const uint32_t h1 = p1 ? load_u32(p1 + (kMin ? 4 : 2)) : 0u;
      lo = _mm256_or_si256(lo, bits_to_0x10((h0 & 0xffffu) | (h1 << 16)));
      hi = _mm256_or_si256(hi, bits_to_0x10((h0 >> 16) | (h1 & 0xffff0000u)));
    }
  }
  // Dword j = first 4 bytes (d, m) of block j < 4, via staggered loads + blends (reads stay
  // inside the 4 blocks); for Q4_0/Q5_0 the odd halves are quant bytes, never used.
  static __m128i headers4(const uint8_t* p) {
    const __m128i h0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i h1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kB - 4));
    const __m128i h2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * kB - 8));
    const __m128i h3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 3 * kB - 12));
    return _mm_blend_epi32(_mm_blend_epi32(h0, h1, 0x2), _mm_blend_epi32(h2, h3, 0x8), 0xc);
  }

  template <int R>
  static void dot(const uint8_t* wrow, const ActView& a, int64_t r, float* out) {
    const int64_t nb = a.n_in / 32;
    const int8_t* aq[R];
    const float* asc[R];
    const uint8_t* ab[R];
    __m256 acc0[R], acc1[R], accm[R];
    for (int k = 0; k < R; ++k) {
      aq[k] = a.q(r + k);
      asc[k] = a.sc(r + k);
      ab[k] = a.bias(r + k);
      acc0[k] = acc1[k] = accm[k] = _mm256_setzero_ps();
    }
    const __m256i perm0 = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
    const __m256i perm1 = _mm256_setr_epi32(4, 4, 4, 4, 6, 6, 6, 6);
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {  // two pairs per step, one accumulator each
      const uint8_t* p = wrow + b * kB;
      __m256i lo0, hi0, lo1, hi1;
      unpack(p, p + kB, lo0, hi0);
      unpack(p + 2 * kB, p + 3 * kB, lo1, hi1);
      const __m256 wd = _mm256_cvtph_ps(headers4(p));  // [d0 m0 d1 m1 d2 m2 d3 m3]
#pragma GCC unroll 4
      for (int k = 0; k < R; ++k) {
        const int8_t* q = aq[k] + b * 32;
        const __m256i i0 = kBias ? _mm256_load_si256(reinterpret_cast<const __m256i*>(ab[k] + b * 32))
                                 : _mm256_setzero_si256();
        const __m256i i1 = kBias ? _mm256_load_si256(reinterpret_cast<const __m256i*>(ab[k] + b * 32 + 64))
                                 : _mm256_setzero_si256();
        const __m256i d0 = dot2(i0, lo0, _mm256_load_si256(reinterpret_cast<const __m256i*>(q)), hi0,
                                _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32)));
        const __m256i d1 = dot2(i1, lo1, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 64)), hi1,
                                _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 96)));
        const __m256 prod = _mm256_mul_ps(wd, _mm256_loadu_ps(asc[k] + 2 * b));
        if (kMin) accm[k] = _mm256_add_ps(accm[k], prod);
        acc0[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_permutevar8x32_ps(prod, perm0), acc0[k]);
        acc1[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_permutevar8x32_ps(prod, perm1), acc1[k]);
      }
    }
    for (; b < nb; b += 2) {  // one pair left (its second block may be the zero pad)
      const uint8_t* p = wrow + b * kB;
      const bool two = b + 1 < nb;
      __m256i lo, hi;
      unpack(p, two ? p + kB : nullptr, lo, hi);
      const uint32_t s0 = kMin ? load_u32(p) : load_u16(p);
      const uint32_t s1 = two ? (kMin ? load_u32(p + kB) : load_u16(p + kB)) : 0u;
      const __m128 wd = _mm_cvtph_ps(_mm_set_epi32(0, 0, int(s1), int(s0)));
      for (int k = 0; k < R; ++k) {
        const int8_t* q = aq[k] + b * 32;
        const __m256i i0 = kBias ? _mm256_load_si256(reinterpret_cast<const __m256i*>(ab[k] + b * 32))
                                 : _mm256_setzero_si256();
        const __m256i d0 = dot2(i0, lo, _mm256_load_si256(reinterpret_cast<const __m256i*>(q)), hi,
                                _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32)));
        const __m256 prod = _mm256_zextps128_ps256(_mm_mul_ps(wd, _mm_loadu_ps(asc[k] + 2 * b)));
        if (kMin) accm[k] = _mm256_add_ps(accm[k], prod);
        acc0[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_permutevar8x32_ps(prod, perm0), acc0[k]);
      }
    }
    for (int k = 0; k < R; ++k) {
      float s = hsum8(_mm256_add_ps(acc0[k], acc1[k]));
      if (kMin) {
        alignas(32) float m[8];
        _mm256_store_ps(m, accm[k]);
        s += (m[1] + m[3]) + (m[5] + m[7]);
      }
      out[k] = s;
    }
  }
};

// Q8_0 × Q8_0, one block per ymm (Natural order).
struct YQ8_0 {
  template <int R>
  static void dot(const uint8_t* wrow, const ActView& a, int64_t r, float* out) {
    const int64_t nb = a.n_in / 32;
    const int8_t* aq[R];
    const float* asc[R];
    __m256 acc[R];
#if LS_VNNI
    const uint8_t* ab[R];
    for (int k = 0; k < R; ++k) ab[k] = a.bias(r + k);
#endif
    for (int k = 0; k < R; ++k) {
      aq[k] = a.q(r + k);
      asc[k] = a.sc(r + k);
      acc[k] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = wrow + b * 34;
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
      const float d = f16(p);
#if LS_VNNI
      // u = w + 128 (unsigned); the act bias lane holds -128*Σa for this block.
      const __m256i u = _mm256_xor_si256(w, _mm256_set1_epi8(char(0x80)));
#else
      const __m256i u = _mm256_sign_epi8(w, w);  // |w|
#endif
#pragma GCC unroll 4
      for (int k = 0; k < R; ++k) {
        const __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(aq[k] + b * 32));
#if LS_VNNI
        const __m256i init = _mm256_load_si256(reinterpret_cast<const __m256i*>(ab[k] + (b >> 1) * 64 + (b & 1) * 32));
        const __m256i dd = ls_dpbusd(init, u, q);
#else
        const __m256i dd =
            _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(q, w)), _mm256_set1_epi16(1));
#endif
        acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dd), _mm256_set1_ps(d * asc[k][2 * b]), acc[k]);
      }
    }
    for (int k = 0; k < R; ++k) out[k] = hsum8(acc[k]);
  }
};

// Q4_K / Q5_K / Q6_K against Q8_K. Integer sums with the 6-/8-bit scales folded into madd
// (int16 scale × int16 pair sums), accumulated in int32 over the super-block; one float FMA
// per super-block; mins (Q4_K/Q5_K) and Q6_K's -32 go through the bsums.
template <GgmlType T>
struct YK {
  static constexpr int kB = T == GgmlType::Q4_K ? 144 : T == GgmlType::Q5_K ? 176 : 210;

  template <int R>
  static void dot(const uint8_t* wrow, const ActView& a, int64_t r, float* out) {
    const int64_t nsb = a.n_in / 256;
    const int8_t* aq[R];
    const float* ad[R];
    const int16_t* abs_[R];
    __m256 acc[R];
    float accm[R];
    for (int k = 0; k < R; ++k) {
      aq[k] = a.q(r + k);
      ad[k] = a.sc(r + k);
      abs_[k] = a.bsums(r + k);
      acc[k] = _mm256_setzero_ps();
      accm[k] = 0.f;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* blk = wrow + s * kB;
      __m256i sumi[R];
      for (int k = 0; k < R; ++k) sumi[k] = _mm256_setzero_si256();
      int sc16[16], mn16[16];
      float d, dmin = 0.f;
      if (T == GgmlType::Q6_K) {
        d = f16(blk + 208);
        const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
        for (int i = 0; i < 16; ++i) { sc16[i] = sc[i]; mn16[i] = 32 * sc[i]; }  // -32·scale·bsum
        for (int h = 0; h < 2; ++h) {
          const uint8_t* L = blk + 64 * h;
          const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(L));
          const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(L + 32));
          const __m256i hh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
          const __m256i m30 = _mm256_set1_epi8(0x30);
          __m256i u[4];
          u[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hh, 4), m30));
          u[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hh, 2), m30));
          u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hh, m30));
          u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                 _mm256_and_si256(_mm256_srli_epi16(hh, 2), m30));
          for (int j = 0; j < 4; ++j) {
            const int sb = 8 * h + 2 * j;  // sub-blocks of 16: sb (bytes 0-15), sb+1 (bytes 16-31)
            const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(short(sc16[sb + 1])), _mm_set1_epi16(short(sc16[sb])));
#pragma GCC unroll 4
            for (int k = 0; k < R; ++k) {
              const __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(aq[k] + 256 * s + 128 * h + 32 * j));
              sumi[k] = _mm256_add_epi32(sumi[k], _mm256_madd_epi16(_mm256_maddubs_epi16(u[j], q), scv));
            }
          }
        }
      } else {
        d = f16(blk);
        dmin = f16(blk + 2);
        const uint8_t* scales = blk + 4;
        const uint8_t* qs = T == GgmlType::Q5_K ? blk + 48 : blk + 16;
        for (int j = 0; j < 8; ++j) k_scale_min(scales, j, sc16[j], mn16[j]);
        __m256i qh = _mm256_setzero_si256();
        if (T == GgmlType::Q5_K) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
        for (int g = 0; g < 4; ++g) {
          const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * g));
          __m256i lo = _mm256_and_si256(x, m4);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
          if (T == GgmlType::Q5_K) {
            const __m256i b0 = _mm256_set1_epi8(char(1 << (2 * g))), b1 = _mm256_set1_epi8(char(2 << (2 * g)));
            const __m256i x10 = _mm256_set1_epi8(0x10);
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), x10));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), x10));
          }
          const __m256i sc_lo = _mm256_set1_epi16(short(sc16[2 * g])), sc_hi = _mm256_set1_epi16(short(sc16[2 * g + 1]));
#pragma GCC unroll 4
          for (int k = 0; k < R; ++k) {
            const int8_t* q = aq[k] + 256 * s + 64 * g;
            const __m256i qa = _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
            const __m256i qb = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32));
            const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, qa), sc_lo),
                                               _mm256_madd_epi16(_mm256_maddubs_epi16(hi, qb), sc_hi));
            sumi[k] = _mm256_add_epi32(sumi[k], p);
          }
        }
      }
      for (int k = 0; k < R; ++k) {
        const int16_t* bs = abs_[k] + 16 * s;
        int summ = 0;
        if (T == GgmlType::Q6_K) {
          for (int i = 0; i < 16; ++i) summ += mn16[i] * bs[i];
          sumi[k] = _mm256_sub_epi32(sumi[k], _mm256_setr_epi32(summ, 0, 0, 0, 0, 0, 0, 0));
        } else {
          for (int j = 0; j < 8; ++j) summ += mn16[j] * (bs[2 * j] + bs[2 * j + 1]);
          accm[k] += (ad[k][s] * dmin) * float(summ);
        }
        acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[k]), _mm256_set1_ps(ad[k][s] * d), acc[k]);
      }
    }
    for (int k = 0; k < R; ++k) out[k] = hsum8(acc[k]) - accm[k];
  }
};

// fp32 activations against F32 / F16 / BF16 weight rows (any n_in; scalar tail).
template <GgmlType T>
struct YFloat {
  static __m256 load8(const uint8_t* w, int64_t i) {
    if (T == GgmlType::F32) return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + i);
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i));
    if (T == GgmlType::F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float load1(const uint8_t* w, int64_t i) {
    if (T == GgmlType::F32) { float f; std::memcpy(&f, w + 4 * i, 4); return f; }
    if (T == GgmlType::F16) return _cvtsh_ss(load_u16(w + 2 * i));
    return bf16_to_f32(load_u16(w + 2 * i));
  }
  template <int R>
  static void dot(const uint8_t* wrow, const ActView& a, int64_t r, float* out) {
    const int64_t n = a.n_in, n8 = n & ~int64_t(7);
    __m256 acc[R];
    for (int k = 0; k < R; ++k) acc[k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n8; i += 8) {
      const __m256 w = load8(wrow, i);
#pragma GCC unroll 4
      for (int k = 0; k < R; ++k) acc[k] = _mm256_fmadd_ps(w, _mm256_loadu_ps(a.xf + (r + k) * n + i), acc[k]);
    }
    for (int k = 0; k < R; ++k) {
      float s = hsum8(acc[k]);
      for (int64_t i = n8; i < n; ++i) s += load1(wrow, i) * a.xf[(r + k) * n + i];
      out[k] = s;
    }
  }
};

// Q8_K activation quantizer, bit-identical to act.cpp's: the signed value of the FIRST element
// with the largest |x| sets iscale = -127/mx; q = min(127, round-half-even(iscale·x)) (cvtps
// rounds half to even in the default MXCSR mode, as the scalar magic-number rounding does).
inline void quantize_q8k_rows_ymm(const float* x, int64_t n_in, int64_t r0, int64_t r1, uint8_t* dst,
                                  const ActLayout& lay) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  for (int64_t r = r0; r < r1; ++r) {
    uint8_t* row = dst + r * lay.row_bytes;
    auto* d = reinterpret_cast<float*>(row + lay.sc_off);
    auto* bsums = reinterpret_cast<int16_t*>(row + lay.bias_off);
    for (int64_t s = 0; s < n_in / 256; ++s) {
      const float* xs = x + r * n_in + 256 * s;
      auto* qs = reinterpret_cast<int8_t*>(row) + 256 * s;
      __m256 m = _mm256_setzero_ps();
      // max(|x|, m) keeps m when |x| is NaN, as the scalar strict '>' comparison skips NaNs.
      for (int i = 0; i < 256; i += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xs + i)), m);
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float amax = _mm_cvtss_f32(m4);
      if (amax == 0.f) {
        d[s] = 0.f;
        std::memset(qs, 0, 256);
        std::memset(bsums + 16 * s, 0, 32);
        continue;
      }
      int first = 0;
      const __m256 am = _mm256_set1_ps(amax);
      for (int i = 0; i < 256; i += 8) {
        const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xs + i)), am, _CMP_EQ_OQ));
        if (mask) {
          first = i + __builtin_ctz(unsigned(mask));
          break;
        }
      }
      const float iscale = -127.f / xs[first];
      const __m256 is = _mm256_set1_ps(iscale);
      const __m256i lim = _mm256_set1_epi32(127);
      for (int g = 0; g < 16; ++g) {
        const __m256i a = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(xs + 16 * g))), lim);
        const __m256i b = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(xs + 16 * g + 8))), lim);
        __m256i t = _mm256_add_epi32(a, b);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        bsums[16 * s + g] = int16_t(_mm_cvtsi128_si32(s4));
        const __m256i p16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);  // 16 int16 in order
        const __m128i p8 = _mm_packs_epi16(_mm256_castsi256_si128(p16), _mm256_extracti128_si256(p16, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16 * g), p8);
      }
      d[s] = 1.f / iscale;
    }
  }
}

// Q8_0 / Q8_1 activation quantizer, bit-identical to the scalar one in act.cpp (max, the
// multiply and round-half-even are exact IEEE steps); Q8_K stays scalar (K-quant layers only).
inline void quantize_rows_ymm(GgmlType wt, const float* x, int64_t n_in, int64_t r0, int64_t r1, uint8_t* dst,
                              const ActLayout& lay) {
  const ActFormat f = act_format(wt);
  if (f.kind == ActKind::Q8_K) {
    quantize_q8k_rows_ymm(x, n_in, r0, r1, dst, lay);
    return;
  }
  if (f.kind != ActKind::Q8_0 && f.kind != ActKind::Q8_1) {
    quantize_act_rows(wt, x, n_in, r0, r1, dst, lay);
    return;
  }
  const int64_t nb = n_in / 32, nbp = (nb + 1) & ~int64_t(1);
  const __m256 sign = _mm256_set1_ps(-0.f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t r = r0; r < r1; ++r) {
    uint8_t* row = dst + r * lay.row_bytes;
    auto* q = reinterpret_cast<int8_t*>(row);
    auto* sc = reinterpret_cast<float*>(row + lay.sc_off);
    auto* bias = reinterpret_cast<int32_t*>(row + lay.bias_off);
    if (f.bias_k) std::memset(bias, 0, size_t(nbp / 2) * 64);
    const float* xr = x + r * n_in;
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = xr + 32 * b;
      __m256 v[4];
      for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(xb + 8 * j);
      __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                               _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float amax = _mm_cvtss_f32(m4);
      const float d = amax / 127.f;
      const __m256 id = _mm256_set1_ps(amax != 0.f ? 127.f / amax : 0.f);
      __m256i qi[4];
      for (int j = 0; j < 4; ++j)
        qi[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      const __m256i s4 = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
      const int sum = _mm_cvtsi128_si32(s);
      const __m256i p = _mm256_permutevar8x32_epi32(
          _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3])), order);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + act_index(f.order, b, 0)), _mm256_castsi256_si128(p));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + act_index(f.order, b, 16)), _mm256_extracti128_si256(p, 1));
      sc[2 * b] = fp16_round(d);
      sc[2 * b + 1] = f.kind == ActKind::Q8_1 ? fp16_round(d * float(sum)) : 0.f;
      if (f.bias_k) bias[(b >> 1) * 16 + ((b & 1) ? (f.order == ActOrder::Natural ? 8 : 4) : 0)] = -f.bias_k * sum;
    }
    if (nbp != nb) {  // zero pad block
      for (int i = 0; i < 32; i += 16) std::memset(q + act_index(f.order, nb, i), 0, 16);
      sc[2 * nb] = sc[2 * nb + 1] = 0.f;
    }
  }
}

inline void fill_ymm(KernelTable& t) {
  t.quantize = &quantize_rows_ymm;
  t.rows[slot(GgmlType::F32)] = &run_rows<YFloat<GgmlType::F32>>;
  t.rows[slot(GgmlType::F16)] = &run_rows<YFloat<GgmlType::F16>>;
  t.rows[slot(GgmlType::BF16)] = &run_rows<YFloat<GgmlType::BF16>>;
  t.rows[slot(GgmlType::Q8_0)] = &run_rows<YQ8_0>;
  t.rows[slot(GgmlType::Q4_0)] = &run_rows<YSimple<GgmlType::Q4_0>>;
  t.rows[slot(GgmlType::Q4_1)] = &run_rows<YSimple<GgmlType::Q4_1>>;
  t.rows[slot(GgmlType::Q5_0)] = &run_rows<YSimple<GgmlType::Q5_0>>;
  t.rows[slot(GgmlType::Q5_1)] = &run_rows<YSimple<GgmlType::Q5_1>>;
  t.rows[slot(GgmlType::Q4_K)] = &run_rows<YK<GgmlType::Q4_K>>;
  t.rows[slot(GgmlType::Q5_K)] = &run_rows<YK<GgmlType::Q5_K>>;
  t.rows[slot(GgmlType::Q6_K)] = &run_rows<YK<GgmlType::Q6_K>>;
}
