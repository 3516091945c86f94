// AVX-512 VNNI path: zmm vpdpbusd kernels for the 32-block types (the decode-critical
// Q4_1 × Q8_1 and Q8_0 × Q8_0 among them); K-quants and float weights use the shared
// 256-bit bodies compiled here with EVEX vpdpbusd.
//
// Everything below the pragma is compiled for AVX-512; all standard headers come first so
// no library template is instantiated with AVX-512 code (COMDAT leak into portable code).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/quant_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
// GCC 12 flags the _mm512_undefined_* operands inside its own intrinsics (false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "quant/rows_driver.h"
#include "quant/il_driver.h"

namespace ls::quant {
namespace {

#define LS_VNNI 1
inline __m256i ls_dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
#include "quant/kernels_ymm.h"
#include "quant/kernels_lowbit_ymm.h"
#undef LS_VNNI

// Q4_0 / Q4_1 / Q5_0 / Q5_1 (PairPerm activations): a zmm holds two blocks
// [lo blk0 | lo blk1 | hi blk0 | hi blk1], exactly the activation pair order, so one
// vpdpbusd per pair; int32 lanes 0-3 and 8-11 belong to blk0, 4-7 and 12-15 to blk1.
// The main loop takes 4 blocks (two zmm, two accumulators), a pair loop handles the rest.
template <GgmlType T>
struct ZSimple {
  static constexpr int kB = T == GgmlType::Q4_0 ? 18 : T == GgmlType::Q4_1 ? 20 : T == GgmlType::Q5_0 ? 22 : 24;
  static constexpr bool kMin = T == GgmlType::Q4_1 || T == GgmlType::Q5_1;
  static constexpr bool kQ5 = T == GgmlType::Q5_0 || T == GgmlType::Q5_1;
  static constexpr bool kBias = !kMin;
  static constexpr int kQs = kQ5 ? (kMin ? 8 : 6) : (kMin ? 4 : 2);

  // Unpacked codes of blocks p0 and p1 (p1 == nullptr: a zero block).
  static __m512i unpack(const uint8_t* p0, const uint8_t* p1) {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + kQs));
    const __m128i q1 = p1 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + kQs)) : _mm_setzero_si128();
    const __m256i x = _mm256_set_m128i(q1, q0);
    __m512i w = _mm512_inserti64x4(_mm512_zextsi256_si512(x), _mm256_srli_epi16(x, 4), 1);
    w = _mm512_and_si512(w, _mm512_set1_epi8(0x0f));
    if (kQ5) {
      const uint32_t h0 = load_u32(p0 + (kMin ? 4 : 2));
      const uint32_t h1 = p1 ? load_u32(p1 + (kMin ? 4 : 2)) : 0u;
      const uint64_t bits = uint64_t((h0 & 0xffffu) | (h1 << 16)) | uint64_t((h0 >> 16) | (h1 & 0xffff0000u)) << 32;
      w = _mm512_mask_add_epi8(w, _cvtu64_mask64(bits), w, _mm512_set1_epi8(0x10));
    }
    return w;
  }
  static uint32_t scales(const uint8_t* p) { return kMin ? load_u32(p) : load_u16(p); }
  // Dword j = the first 4 bytes of block j (j < 4): four loads and blends instead of GPR
  // packing + pinsrd (port-5 bound). Reads stay inside the 4 blocks.
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
    __m512 acc0[R], acc1[R];
    __m256 accm[R];
    for (int k = 0; k < R; ++k) {
      aq[k] = a.q(r + k);
      asc[k] = a.sc(r + k);
      ab[k] = a.bias(r + k);
      acc0[k] = _mm512_setzero_ps();
      acc1[k] = _mm512_setzero_ps();
      accm[k] = _mm256_setzero_ps();
    }
    const __m512i perm0 = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 0, 2, 2, 2, 2);
    const __m512i perm1 = _mm512_setr_epi32(4, 4, 4, 4, 6, 6, 6, 6, 4, 4, 4, 4, 6, 6, 6, 6);
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
      const uint8_t* p = wrow + b * kB;
      const __m512i w0 = unpack(p, p + kB);
      const __m512i w1 = unpack(p + 2 * kB, p + 3 * kB);
      // [d0 m0 d1 m1 d2 m2 d3 m3]: dword j of the 4-byte-staggered loads is block j's header
      // (for Q4_0/Q5_0 the odd halves are quant bytes; those lanes are never used).
      const __m256 wd = _mm256_cvtph_ps(headers4(p));
#pragma GCC unroll 4
      for (int k = 0; k < R; ++k) {
        const int8_t* q = aq[k] + b * 32;
        const __m512i i0 = kBias ? _mm512_load_si512(ab[k] + b * 32) : _mm512_setzero_si512();
        const __m512i i1 = kBias ? _mm512_load_si512(ab[k] + b * 32 + 64) : _mm512_setzero_si512();
        const __m512i d0 = _mm512_dpbusd_epi32(i0, w0, _mm512_load_si512(q));
        const __m512i d1 = _mm512_dpbusd_epi32(i1, w1, _mm512_load_si512(q + 64));
        const __m256 prod = _mm256_mul_ps(wd, _mm256_loadu_ps(asc[k] + 2 * b));
        if (kMin) accm[k] = _mm256_add_ps(accm[k], prod);
        const __m512 pz = _mm512_zextps256_ps512(prod);
        acc0[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_permutexvar_ps(perm0, pz), acc0[k]);
        acc1[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_permutexvar_ps(perm1, pz), acc1[k]);
      }
    }
    for (; b < nb; b += 2) {  // one pair left (its second block may be the zero pad)
      const uint8_t* p = wrow + b * kB;
      const bool two = b + 1 < nb;
      const __m512i w0 = unpack(p, two ? p + kB : nullptr);
      const __m256 wd = _mm256_castps128_ps256(
          _mm_cvtph_ps(_mm_set_epi32(0, 0, two ? int(scales(p + kB)) : 0, int(scales(p)))));
      for (int k = 0; k < R; ++k) {
        const __m512i i0 = kBias ? _mm512_load_si512(ab[k] + b * 32) : _mm512_setzero_si512();
        const __m512i d0 = _mm512_dpbusd_epi32(i0, w0, _mm512_load_si512(aq[k] + b * 32));
        const __m256 prod =
            _mm256_castps128_ps256(_mm_mul_ps(_mm256_castps256_ps128(wd), _mm_loadu_ps(asc[k] + 2 * b)));
        const __m256 prod_clean = _mm256_insertf128_ps(prod, _mm_setzero_ps(), 1);
        if (kMin) accm[k] = _mm256_add_ps(accm[k], prod_clean);
        acc0[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0),
                                  _mm512_permutexvar_ps(perm0, _mm512_zextps256_ps512(prod_clean)), acc0[k]);
      }
    }
    for (int k = 0; k < R; ++k) {
      float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0[k], acc1[k]));
      if (kMin) {
        alignas(32) float m[8];
        _mm256_store_ps(m, accm[k]);
        s += (m[1] + m[3]) + (m[5] + m[7]);
      }
      out[k] = s;
    }
  }
};

// Q8_0 × Q8_0 (Natural order): u = w ^ 0x80 = w + 128 as u8, and the activation bias
// (-128·Σa per block, lanes 0 and 8 of each pair) is the initial accumulator, so one
// vpdpbusd per pair of blocks gives the exact signed dots (blk0 in lanes 0-7, blk1 in 8-15).
struct ZQ8_0 {
  static __m512i load_pair(const uint8_t* p0, const uint8_t* p1) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0 + 2));
    const __m256i b = p1 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1 + 2)) : _mm256_set1_epi8(char(0x80));
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_zextsi256_si512(a), b, 1), _mm512_set1_epi8(char(0x80)));
  }

  template <int R>
  static void dot(const uint8_t* wrow, const ActView& a, int64_t r, float* out) {
    const int64_t nb = a.n_in / 32;
    const int8_t* aq[R];
    const float* asc[R];
    const uint8_t* ab[R];
    __m512 acc0[R], acc1[R];
    for (int k = 0; k < R; ++k) {
      aq[k] = a.q(r + k);
      asc[k] = a.sc(r + k);
      ab[k] = a.bias(r + k);
      acc0[k] = _mm512_setzero_ps();
      acc1[k] = _mm512_setzero_ps();
    }
    const __m512i perm0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
    const __m512i perm1 = _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6);
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
      const uint8_t* p = wrow + b * 34;
      const __m512i u0 = load_pair(p, p + 34);
      const __m512i u1 = load_pair(p + 68, p + 102);
      // [d0 x d1 x d2 x d3 x]: dword j of the staggered loads starts block j (x = quant bytes,
      // lanes never used; the activation scale pairs are [da 0] for Q8_0).
      const __m128i h0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m128i h1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 30));
      const __m128i h2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 60));
      const __m128i h3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 90));
      const __m256 wd = _mm256_cvtph_ps(
          _mm_blend_epi32(_mm_blend_epi32(h0, h1, 0x2), _mm_blend_epi32(h2, h3, 0x8), 0xc));
#pragma GCC unroll 4
      for (int k = 0; k < R; ++k) {
        const int8_t* q = aq[k] + b * 32;
        const __m512i d0 = _mm512_dpbusd_epi32(_mm512_load_si512(ab[k] + b * 32), u0, _mm512_load_si512(q));
        const __m512i d1 = _mm512_dpbusd_epi32(_mm512_load_si512(ab[k] + b * 32 + 64), u1, _mm512_load_si512(q + 64));
        const __m512 pz = _mm512_zextps256_ps512(_mm256_mul_ps(wd, _mm256_loadu_ps(asc[k] + 2 * b)));
        acc0[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_permutexvar_ps(perm0, pz), acc0[k]);
        acc1[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_permutexvar_ps(perm1, pz), acc1[k]);
      }
    }
    for (; b < nb; b += 2) {
      const uint8_t* p = wrow + b * 34;
      const bool two = b + 1 < nb;
      const __m512i u0 = load_pair(p, two ? p + 34 : nullptr);
      const __m128 wd = _mm_cvtph_ps(_mm_set_epi32(0, 0, two ? load_u16(p + 34) : 0, load_u16(p)));
      for (int k = 0; k < R; ++k) {
        const __m512i d0 = _mm512_dpbusd_epi32(_mm512_load_si512(ab[k] + b * 32), u0, _mm512_load_si512(aq[k] + b * 32));
        const __m512 pz = _mm512_zextps128_ps512(_mm_mul_ps(wd, _mm_loadu_ps(asc[k] + 2 * b)));
        acc0[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_permutexvar_ps(perm0, pz), acc0[k]);
      }
    }
    for (int k = 0; k < R; ++k) out[k] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[k], acc1[k]));
  }
};

#include "quant/il_zmm.h"
#include "quant/il_kquant_zmm.h"
#include "quant/il_lowbit_zmm.h"

}  // namespace

void fill_avx512_vnni(KernelTable& t) {
  t.il_rows[slot(GgmlType::Q8_0)] = &run_il_groups<ZIl<GgmlType::Q8_0>>;
  t.il_rows[slot(GgmlType::Q4_0)] = &run_il_groups<ZIl<GgmlType::Q4_0>>;
  t.il_rows[slot(GgmlType::Q4_1)] = &run_il_groups<ZIl<GgmlType::Q4_1>>;
  t.il_rows[slot(GgmlType::Q5_0)] = &run_il_groups<ZIl<GgmlType::Q5_0>>;
  t.il_rows[slot(GgmlType::Q5_1)] = &run_il_groups<ZIl<GgmlType::Q5_1>>;
  t.il_rows[slot(GgmlType::Q4_K)] = &run_il_groups<ZKIl<GgmlType::Q4_K>>;
  t.il_rows[slot(GgmlType::Q5_K)] = &run_il_groups<ZKIl<GgmlType::Q5_K>>;
  t.il_rows[slot(GgmlType::Q6_K)] = &run_il_groups<ZKIl<GgmlType::Q6_K>>;
  t.il_rows[slot(GgmlType::IQ4_NL)] = &run_il_groups<ZIl<GgmlType::IQ4_NL>>;
  t.il_rows[slot(GgmlType::MXFP4)] = &run_il_groups<ZIl<GgmlType::MXFP4>>;
  t.il_rows[slot(GgmlType::IQ4_XS)] = &run_il_groups<ZKIl<GgmlType::IQ4_XS>>;
  t.il_rows[slot(GgmlType::Q2_K)] = &run_il_groups<ZLowIl<GgmlType::Q2_K>>;
  t.il_rows[slot(GgmlType::Q3_K)] = &run_il_groups<ZLowIl<GgmlType::Q3_K>>;
  fill_ymm(t);
  fill_lowbit_ymm(t);
  t.rows[slot(GgmlType::Q8_0)] = &run_rows<ZQ8_0>;
  t.rows[slot(GgmlType::Q4_0)] = &run_rows<ZSimple<GgmlType::Q4_0>>;
  t.rows[slot(GgmlType::Q4_1)] = &run_rows<ZSimple<GgmlType::Q4_1>>;
  t.rows[slot(GgmlType::Q5_0)] = &run_rows<ZSimple<GgmlType::Q5_0>>;
  t.rows[slot(GgmlType::Q5_1)] = &run_rows<ZSimple<GgmlType::Q5_1>>;
}

}  // namespace ls::quant

#pragma GCC pop_options
