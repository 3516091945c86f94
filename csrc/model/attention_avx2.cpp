// AVX2 + FMA + F16C attention kernels over the fp16 KV cache (see attention.h for the
// contract). Standard headers first, then the target pragma (no COMDAT leak).
//
// The g query heads of one call share each K/V row: a row is loaded and widened to fp32 once
// and used by all of them (GQA/MQA: SmolLM2 has 3 query heads per kv head, Gemma 3 four).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "common/cpu_features.h"
#include "common/fp16.h"
#include "model/attention.h"
#include "model/attention_exp.h"

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

// reduce8 of four accumulators at once: hadd(a,b) = [a:01, a:23, b:01, b:23 | a:45, a:67, b:45,
// b:67]; hadd of two of those = [a:0123, b:0123, c:0123, d:0123 | a:4567, ...]; lo + hi.
inline __m128 reduce8x4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// One (head, position): 8 lane accumulators over the full 8-chunks, reduce8, then the tail.
inline float score1(const float* q, const uint16_t* kr, int hd, float scale) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= hd; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8_f16(kr + i), acc);
  float s = reduce8(acc);
  for (; i < hd; ++i) s = std::fma(q[i], fp16_to_f32(kr[i]), s);
  return s * scale;
}

// G heads × P positions per step (G·P = 4 or 8 accumulators: independent FMA chains hide the
// FMA latency). Each (head, position) gets exactly score1's arithmetic (hd % 8 == 0).
template <int G, int P>
int scores_block(const float* q, const uint16_t* k, int64_t stride, int n_pos, int hd, float scale, float* s,
                 int64_t s_stride) {
  static_assert((G * P) % 4 == 0, "reduce8x4 takes accumulators four at a time");
  const __m128 vscale = _mm_set1_ps(scale);
  int p = 0;
  for (; p + P <= n_pos; p += P) {
    __m256 acc[G * P];
    for (int a = 0; a < G * P; ++a) acc[a] = _mm256_setzero_ps();
    const uint16_t* kp = k + p * stride;
    // The rows are kv_dim apart (several kv heads interleaved): fetch rows 16 positions ahead
    // so the strided loads below do not wait on L2/DRAM one line at a time.
    for (int j = 16; j < 16 + P && p + j < n_pos; ++j)
      for (int i = 0; i < hd; i += 32) _mm_prefetch(reinterpret_cast<const char*>(kp + j * stride + i), _MM_HINT_T0);
    for (int i = 0; i < hd; i += 8) {
      __m256 kv[P];
      for (int j = 0; j < P; ++j) kv[j] = load8_f16(kp + j * stride + i);
      for (int h = 0; h < G; ++h) {
        const __m256 qv = _mm256_loadu_ps(q + h * hd + i);
        for (int j = 0; j < P; ++j) acc[h * P + j] = _mm256_fmadd_ps(qv, kv[j], acc[h * P + j]);
      }
    }
    float r[G * P];
    for (int a = 0; a < G * P; a += 4)
      _mm_storeu_ps(r + a, _mm_mul_ps(reduce8x4(acc[a], acc[a + 1], acc[a + 2], acc[a + 3]), vscale));
    for (int h = 0; h < G; ++h)
      for (int j = 0; j < P; ++j) s[h * s_stride + p + j] = r[h * P + j];
  }
  return p;
}

void scores_avx2(const float* q, int g, const uint16_t* k, int64_t stride, int n_pos, int hd, float scale, float* s,
                 int64_t s_stride) {
  int p = 0;
  if (hd % 8 == 0) {
    switch (g) {
      case 1: p = scores_block<1, 4>(q, k, stride, n_pos, hd, scale, s, s_stride); break;
      case 2: p = scores_block<2, 2>(q, k, stride, n_pos, hd, scale, s, s_stride); break;
      case 3: p = scores_block<3, 4>(q, k, stride, n_pos, hd, scale, s, s_stride); break;
      default: p = scores_block<4, 2>(q, k, stride, n_pos, hd, scale, s, s_stride); break;
    }
  }
  for (int h = 0; h < g; ++h)
    for (int pp = p; pp < n_pos; ++pp) s[h * s_stride + pp] = score1(q + h * hd, k + pp * stride, hd, scale);
}

#include "model/expf_avx2.h"
#include "model/attention_exp_sum.h"

float max_avx2(const float* w, int n) {
  int p = 0;
  float m = w[0];
  if (n >= 8) {
    __m256 vm = _mm256_loadu_ps(w);
    for (p = 8; p + 8 <= n; p += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(w + p));
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
    m = _mm_cvtss_f32(x);
  }
  for (; p < n; ++p) m = m > w[p] ? m : w[p];
  return m;
}

void normalize_avx2(float* w, int n, float f) {
  const __m256 vf = _mm256_set1_ps(f);
  int p = 0;
  for (; p + 8 <= n; p += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(w + p), vf), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(w + p, _mm256_cvtph_ps(h));
  }
  for (; p < n; ++p) w[p] = fp16_round(w[p] * f);
}

// G heads × D vectors of 8 dims per pass over the positions (G·D accumulators, each one fma
// chain over p continuing from out). Returns the first dim not covered (a multiple of 8·D).
template <int G, int D>
int weighted_block(const float* w, int64_t w_stride, const uint16_t* v, int64_t stride, int n_pos, int hd, float* out,
                   int64_t o_stride) {
  int j = 0;
  for (; j + 8 * D <= hd; j += 8 * D) {
    __m256 acc[G * D];
    for (int h = 0; h < G; ++h)
      for (int d = 0; d < D; ++d) acc[h * D + d] = _mm256_loadu_ps(out + h * o_stride + j + 8 * d);
    const uint16_t* vr = v + j;
    for (int p = 0; p < n_pos; ++p, vr += stride) {
      // The first pass fetches whole rows 8 positions ahead (later passes then read L2).
      if (j == 0 && p + 8 < n_pos)
        for (int d = 0; d < hd; d += 32) _mm_prefetch(reinterpret_cast<const char*>(vr + 8 * stride + d), _MM_HINT_T0);
      __m256 vv[D];
      for (int d = 0; d < D; ++d) vv[d] = load8_f16(vr + 8 * d);
      for (int h = 0; h < G; ++h) {
        const __m256 wp = _mm256_broadcast_ss(w + h * w_stride + p);
        for (int d = 0; d < D; ++d) acc[h * D + d] = _mm256_fmadd_ps(wp, vv[d], acc[h * D + d]);
      }
    }
    for (int h = 0; h < G; ++h)
      for (int d = 0; d < D; ++d) _mm256_storeu_ps(out + h * o_stride + j + 8 * d, acc[h * D + d]);
  }
  return j;
}

template <int G>
void weighted_group(const float* w, int64_t w_stride, const uint16_t* v, int64_t stride, int n_pos, int hd, float* out,
                    int64_t o_stride) {
  constexpr int D = G == 1 ? 8 : G == 2 ? 4 : 2;
  int j = weighted_block<G, D>(w, w_stride, v, stride, n_pos, hd, out, o_stride);
  j += weighted_block<G, 1>(w, w_stride, v + j, stride, n_pos, hd - j, out + j, o_stride);
  for (; j < hd; ++j)
    for (int h = 0; h < G; ++h) {
      float a = out[h * o_stride + j];
      for (int p = 0; p < n_pos; ++p) a = std::fma(w[h * w_stride + p], fp16_to_f32(v[p * stride + j]), a);
      out[h * o_stride + j] = a;
    }
}

void weighted_sum_avx2(const float* w, int g, int64_t w_stride, const uint16_t* v, int64_t stride, int n_pos, int hd,
                       float* out, int64_t o_stride) {
  switch (g) {
    case 1: weighted_group<1>(w, w_stride, v, stride, n_pos, hd, out, o_stride); break;
    case 2: weighted_group<2>(w, w_stride, v, stride, n_pos, hd, out, o_stride); break;
    case 3: weighted_group<3>(w, w_stride, v, stride, n_pos, hd, out, o_stride); break;
    default: weighted_group<4>(w, w_stride, v, stride, n_pos, hd, out, o_stride); break;
  }
}

void store_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j), _mm256_cvtps_ph(_mm256_loadu_ps(src + j), _MM_FROUND_TO_NEAREST_INT));
  for (; j < n; ++j) dst[j] = f32_to_fp16(src[j]);
}

const AttentionKernels kAvx2 = {scores_avx2,       max_avx2,   exp_sum_rows, normalize_avx2,
                                weighted_sum_avx2, store_avx2, "avx2"};

}  // namespace
}  // namespace ls

#pragma GCC pop_options

namespace ls {
// Outside the target region: safe to call on any CPU.
const AttentionKernels* attention_kernels_avx2() { return cpu_features().avx2 ? &kAvx2 : nullptr; }
}  // namespace ls
