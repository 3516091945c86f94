// AVX2 + FMA + F16C attention kernels over the fp16 KV cache (see attention.h for the
// contract). Standard headers first, then the target pragma (no COMDAT leak).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "common/cpu_features.h"
#include "common/fp16.h"
#include "model/attention.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace ls {
namespace {

inline __m256 load8_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Σ of the 8 lanes as ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)), as the portable kernel.
inline float reduce8(__m256 acc) {
  const __m256 h = _mm256_hadd_ps(acc, acc);  // [a0+a1, a2+a3, ., . | a4+a5, a6+a7, ., .]
  const __m256 hh = _mm256_hadd_ps(h, h);     // [(a0+a1)+(a2+a3), ... | (a4+a5)+(a6+a7), ...]
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(hh), _mm256_extractf128_ps(hh, 1)));
}

// One position: 8 lane accumulators over the full 8-chunks, reduce8, then the scalar tail.
inline float score1(const float* q, const uint16_t* kr, int hd, float scale) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= hd; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8_f16(kr + i), acc);
  float s = reduce8(acc);
  for (; i < hd; ++i) s = std::fma(q[i], fp16_to_f32(kr[i]), s);
  return s * scale;
}

void scores_avx2(const float* q, const uint16_t* k, int64_t stride, int n_pos, int hd, float scale, float* scores) {
  int p = 0;
  if (hd % 8 == 0) {
    // Four positions at a time: four independent FMA chains hide the FMA latency. Each
    // position's arithmetic is exactly score1's (same lanes, same reduction order).
    const __m128 vscale = _mm_set1_ps(scale);
    for (; p + 4 <= n_pos; p += 4) {
      const uint16_t* k0 = k + p * stride;
      const uint16_t *k1 = k0 + stride, *k2 = k1 + stride, *k3 = k2 + stride;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int i = 0; i < hd; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        a0 = _mm256_fmadd_ps(qv, load8_f16(k0 + i), a0);
        a1 = _mm256_fmadd_ps(qv, load8_f16(k1 + i), a1);
        a2 = _mm256_fmadd_ps(qv, load8_f16(k2 + i), a2);
        a3 = _mm256_fmadd_ps(qv, load8_f16(k3 + i), a3);
      }
      // hadd(a0,a1) = [a0:01, a0:23, a1:01, a1:23 | a0:45, a0:67, a1:45, a1:67], likewise a2,a3;
      // hadd of those = [p0:0123, p1:0123, p2:0123, p3:0123 | p0:4567, ...]; lo + hi per position.
      const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
      const __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
      _mm_storeu_ps(scores + p, _mm_mul_ps(s, vscale));
    }
  }
  for (; p < n_pos; ++p) scores[p] = score1(q, k + p * stride, hd, scale);
}

void normalize_avx2(float* w, int n_pos, float inv) {
  const __m256 vinv = _mm256_set1_ps(inv);
  int p = 0;
  for (; p + 8 <= n_pos; p += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(w + p), vinv), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(w + p, _mm256_cvtph_ps(h));
  }
  for (; p < n_pos; ++p) w[p] = fp16_round(w[p] * inv);
}

void weighted_sum_avx2(const float* w, const uint16_t* v, int64_t stride, int n_pos, int hd, float* out) {
  // Each out[j] = fma chain over p in increasing order, starting from 0; the output is held in
  // registers for 64 dims at a time (8 accumulators) while all positions stream past.
  int j = 0;
  for (; j + 64 <= hd; j += 64) {
    __m256 a[8];
    for (int r = 0; r < 8; ++r) a[r] = _mm256_setzero_ps();
    const uint16_t* vr = v + j;
    for (int p = 0; p < n_pos; ++p, vr += stride) {
      const __m256 wp = _mm256_broadcast_ss(w + p);
      for (int r = 0; r < 8; ++r) a[r] = _mm256_fmadd_ps(wp, load8_f16(vr + 8 * r), a[r]);
    }
    for (int r = 0; r < 8; ++r) _mm256_storeu_ps(out + j + 8 * r, a[r]);
  }
  for (; j + 8 <= hd; j += 8) {
    __m256 a = _mm256_setzero_ps();
    const uint16_t* vr = v + j;
    for (int p = 0; p < n_pos; ++p, vr += stride) a = _mm256_fmadd_ps(_mm256_broadcast_ss(w + p), load8_f16(vr), a);
    _mm256_storeu_ps(out + j, a);
  }
  for (; j < hd; ++j) {
    float a = 0.f;
    for (int p = 0; p < n_pos; ++p) a = std::fma(w[p], fp16_to_f32(v[p * stride + j]), a);
    out[j] = a;
  }
}

void store_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j), _mm256_cvtps_ph(_mm256_loadu_ps(src + j), _MM_FROUND_TO_NEAREST_INT));
  for (; j < n; ++j) dst[j] = f32_to_fp16(src[j]);
}

const AttentionKernels kAvx2 = {scores_avx2, normalize_avx2, weighted_sum_avx2, store_avx2, "avx2"};

}  // namespace
}  // namespace ls

#pragma GCC pop_options

namespace ls {
// Outside the target region: safe to call on any CPU.
const AttentionKernels* attention_kernels_avx2() { return cpu_features().avx2 ? &kAvx2 : nullptr; }
}  // namespace ls
