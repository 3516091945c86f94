// AVX-512 attention kernels over the fp16 KV cache: the AVX2 kernels' arithmetic, operation for
// operation, on twice the width (so both paths give identical bits; attention.h).
//
// * scores: each zmm holds the 8 lane partial sums of TWO positions (lanes 0–7 position p,
//   8–15 position p+1), so every (head, position) sees exactly the AVX2 lane order and
//   reduction; one widening instruction converts 16 fp16 values instead of 8.
// * weighted sum: one fma chain per output element in increasing p, like every path; zmm
//   accumulators only change how many elements advance per instruction. The 32 registers hold
//   3–4 query heads × 64 dims of accumulators at once, so each V row is widened once per group.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "common/cpu_features.h"
#include "common/fp16.h"
#include "model/attention.h"
#include "model/attention_exp.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx2,fma,f16c")
// GCC 12 flags its own AVX-512 intrinsics' `__Y = __Y` idiom.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ls {
namespace {

inline __m256 load8_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// 8 fp16 of row a then 8 of row b, widened: [a0..a7 | b0..b7].
inline __m512 load8x2_f16(const uint16_t* a, const uint16_t* b) {
  const __m256i ab = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                             _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  return _mm512_cvtph_ps(ab);
}

inline __m128 reduce8x4(__m256 a, __m256 b, __m256 c, __m256 d) {  // as attention_avx2.cpp
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

inline float reduce8(__m256 acc) {
  const __m256 h = _mm256_hadd_ps(acc, acc);
  const __m256 hh = _mm256_hadd_ps(h, h);
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(hh), _mm256_extractf128_ps(hh, 1)));
}

inline float score1(const float* q, const uint16_t* kr, int hd, float scale) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= hd; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8_f16(kr + i), acc);
  float s = reduce8(acc);
  for (; i < hd; ++i) s = std::fma(q[i], fp16_to_f32(kr[i]), s);
  return s * scale;
}

// G heads × 2·P2 positions per step (hd % 8 == 0).
template <int G, int P2>
int scores_block(const float* q, const uint16_t* k, int64_t stride, int n_pos, int hd, float scale, float* s,
                 int64_t s_stride) {
  static_assert((G * P2 * 2) % 4 == 0, "reduce8x4 takes accumulators four at a time");
  const __m128 vscale = _mm_set1_ps(scale);
  int p = 0;
  for (; p + 2 * P2 <= n_pos; p += 2 * P2) {
    __m512 acc[G * P2];
    for (int a = 0; a < G * P2; ++a) acc[a] = _mm512_setzero_ps();
    const uint16_t* kp = k + p * stride;
    // The rows are kv_dim apart (several kv heads interleaved): fetch rows 16 positions ahead
    // so the strided loads below do not wait on L2/DRAM one line at a time.
    for (int j = 16; j < 16 + 2 * P2 && p + j < n_pos; ++j)
      for (int i = 0; i < hd; i += 32) _mm_prefetch(reinterpret_cast<const char*>(kp + j * stride + i), _MM_HINT_T0);
    for (int i = 0; i < hd; i += 8) {
      __m512 kv[P2];
      for (int j = 0; j < P2; ++j) kv[j] = load8x2_f16(kp + (2 * j) * stride + i, kp + (2 * j + 1) * stride + i);
      for (int h = 0; h < G; ++h) {
        const __m512 qv = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(q + h * hd + i))));
        for (int j = 0; j < P2; ++j) acc[h * P2 + j] = _mm512_fmadd_ps(qv, kv[j], acc[h * P2 + j]);
      }
    }
    // Halves in order: acc[h·P2 + j] lo = position p+2j, hi = p+2j+1.
    __m256 half[G * P2 * 2];
    for (int a = 0; a < G * P2; ++a) {
      half[2 * a] = _mm512_castps512_ps256(acc[a]);
      half[2 * a + 1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[a]), 1));
    }
    float r[G * P2 * 2];
    for (int a = 0; a < G * P2 * 2; a += 4)
      _mm_storeu_ps(r + a, _mm_mul_ps(reduce8x4(half[a], half[a + 1], half[a + 2], half[a + 3]), vscale));
    for (int h = 0; h < G; ++h)
      for (int j = 0; j < 2 * P2; ++j) s[h * s_stride + p + j] = r[h * P2 * 2 + j];
  }
  return p;
}

void scores_avx512(const float* q, int g, const uint16_t* k, int64_t stride, int n_pos, int hd, float scale, float* s,
                   int64_t s_stride) {
  int p = 0;
  if (hd % 8 == 0) {
    switch (g) {
      case 1: p = scores_block<1, 4>(q, k, stride, n_pos, hd, scale, s, s_stride); break;
      case 2: p = scores_block<2, 4>(q, k, stride, n_pos, hd, scale, s, s_stride); break;
      case 3: p = scores_block<3, 4>(q, k, stride, n_pos, hd, scale, s, s_stride); break;
      default: p = scores_block<4, 4>(q, k, stride, n_pos, hd, scale, s, s_stride); break;
    }
  }
  for (int h = 0; h < g; ++h)
    for (int pp = p; pp < n_pos; ++pp) s[h * s_stride + pp] = score1(q + h * hd, k + pp * stride, hd, scale);
}

// Eight exps in double precision, operation for operation glibc's expf (attention_exp.h; the
// same operations as attention_avx2.cpp's exp8, on one zmm instead of two ymm).
inline __m256 exp8(__m256 x, const int64_t* tab) {
  using namespace expf_glibc;
  const __m512d xd = _mm512_cvtps_pd(x);
  const __m512d inv = _mm512_set1_pd(kInvLn2x32), shift = _mm512_set1_pd(kShift);
  const __m512d kd_shifted = _mm512_fmadd_pd(inv, xd, shift);
  const __m512i ki = _mm512_castpd_si512(kd_shifted);
  const __m512d r = _mm512_fmsub_pd(inv, xd, _mm512_sub_pd(kd_shifted, shift));
  const __m512i t = _mm512_add_epi64(_mm512_i64gather_epi64(_mm512_and_si512(ki, _mm512_set1_epi64(31)), tab, 8),
                                     _mm512_slli_epi64(ki, 47));
  const __m512d z = _mm512_fmadd_pd(r, _mm512_set1_pd(kC0), _mm512_set1_pd(kC1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(kC2), _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(z, r2, y);
  __m256 e = _mm512_cvtpd_ps(_mm512_mul_pd(y, _mm512_castsi512_pd(t)));
  // glibc's results for |x| ≥ 88 outside the ordinary path.
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(kUnderflow), _CMP_LT_OQ);
  const __m256 may = _mm256_andnot_ps(under, _mm256_cmp_ps(x, _mm256_set1_ps(kMayUnderflow), _CMP_LT_OQ));
  e = _mm256_blendv_ps(e, _mm256_setzero_ps(), under);
  e = _mm256_blendv_ps(e, _mm256_castsi256_ps(_mm256_set1_epi32(1)), may);  // smallest subnormal
  e = _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(kOverflow), _CMP_GT_OQ));
  return _mm256_blendv_ps(e, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

#include "model/attention_exp_sum.h"

// G heads × D zmm (16 dims each) per pass over the positions. Returns the dims covered.
template <int G, int D>
int weighted_block(const float* w, int64_t w_stride, const uint16_t* v, int64_t stride, int n_pos, int hd, float* out,
                   int64_t o_stride) {
  int j = 0;
  for (; j + 16 * D <= hd; j += 16 * D) {
    __m512 acc[G * D];
    for (int h = 0; h < G; ++h)
      for (int d = 0; d < D; ++d) acc[h * D + d] = _mm512_loadu_ps(out + h * o_stride + j + 16 * d);
    const uint16_t* vr = v + j;
    for (int p = 0; p < n_pos; ++p, vr += stride) {
      // The first pass fetches whole rows 8 positions ahead (later passes then read L2).
      if (j == 0 && p + 8 < n_pos)
        for (int d = 0; d < hd; d += 32) _mm_prefetch(reinterpret_cast<const char*>(vr + 8 * stride + d), _MM_HINT_T0);
      __m512 vv[D];
      for (int d = 0; d < D; ++d) vv[d] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(vr + 16 * d)));
      for (int h = 0; h < G; ++h) {
        const __m512 wp = _mm512_set1_ps(w[h * w_stride + p]);
        for (int d = 0; d < D; ++d) acc[h * D + d] = _mm512_fmadd_ps(wp, vv[d], acc[h * D + d]);
      }
    }
    for (int h = 0; h < G; ++h)
      for (int d = 0; d < D; ++d) _mm512_storeu_ps(out + h * o_stride + j + 16 * d, acc[h * D + d]);
  }
  return j;
}

template <int G>
void weighted_group(const float* w, int64_t w_stride, const uint16_t* v, int64_t stride, int n_pos, int hd, float* out,
                    int64_t o_stride) {
  constexpr int D = G <= 2 ? 8 : 4;
  int j = weighted_block<G, D>(w, w_stride, v, stride, n_pos, hd, out, o_stride);
  j += weighted_block<G, 1>(w, w_stride, v + j, stride, n_pos, hd - j, out + j, o_stride);
  for (; j + 8 <= hd; j += 8) {  // one 8-dim vector left
    __m256 acc[G];
    for (int h = 0; h < G; ++h) acc[h] = _mm256_loadu_ps(out + h * o_stride + j);
    for (int p = 0; p < n_pos; ++p) {
      const __m256 vv = load8_f16(v + p * stride + j);
      for (int h = 0; h < G; ++h) acc[h] = _mm256_fmadd_ps(_mm256_set1_ps(w[h * w_stride + p]), vv, acc[h]);
    }
    for (int h = 0; h < G; ++h) _mm256_storeu_ps(out + h * o_stride + j, acc[h]);
  }
  for (; j < hd; ++j)
    for (int h = 0; h < G; ++h) {
      float a = out[h * o_stride + j];
      for (int p = 0; p < n_pos; ++p) a = std::fma(w[h * w_stride + p], fp16_to_f32(v[p * stride + j]), a);
      out[h * o_stride + j] = a;
    }
}

void weighted_sum_avx512(const float* w, int g, int64_t w_stride, const uint16_t* v, int64_t stride, int n_pos, int hd,
                         float* out, int64_t o_stride) {
  switch (g) {
    case 1: weighted_group<1>(w, w_stride, v, stride, n_pos, hd, out, o_stride); break;
    case 2: weighted_group<2>(w, w_stride, v, stride, n_pos, hd, out, o_stride); break;
    case 3: weighted_group<3>(w, w_stride, v, stride, n_pos, hd, out, o_stride); break;
    default: weighted_group<4>(w, w_stride, v, stride, n_pos, hd, out, o_stride); break;
  }
}

}  // namespace
}  // namespace ls

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace ls {
// Outside the target region: safe to call on any CPU. max / normalize / store are the AVX2
// ones (memory-bound or tiny next to the three kernels above).
const AttentionKernels* attention_kernels_avx512() {
  if (!cpu_features().avx512 || !attention_kernels_avx2()) return nullptr;
  static const AttentionKernels table = [] {
    AttentionKernels t = *attention_kernels_avx2();
    t.scores = scores_avx512;
    t.weighted_sum = weighted_sum_avx512;
    t.exp_sum = exp_sum_rows;
    t.name = "avx512";
    return t;
  }();
  return &table;
}
}  // namespace ls
