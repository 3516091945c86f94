// AVX2+FMA versions of the sampler's whole-vocabulary loops. Only called after
// cpu_features().avx2 was verified by execution; compiled with per-function target attributes
// so the rest of the build stays portable.
#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "sampler/kernels.h"

#define LS_AVX2 __attribute__((target("avx2,fma")))

namespace ls::sampler_kernels {
namespace {

LS_AVX2 inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

LS_AVX2 inline double hsum(__m256 v) {
  // Widen to double before adding the lanes: the block sums feed double accumulators.
  __m256d a = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                            _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

// exp(a) for a <= 0; lanes where !(a >= -87) (underflow, -inf, NaN) give 0. Same algorithm as
// exp_nonpos() in kernels.cpp, with FMA.
LS_AVX2 inline __m256 exp8(__m256 a) {
  const __m256 alive = _mm256_cmp_ps(a, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
  a = _mm256_max_ps(a, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), a);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  const __m256 z = _mm256_mul_ps(r, r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, z, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  return _mm256_and_ps(y, alive);
}

}  // namespace

LS_AVX2 float max_of_avx2(const float* x, size_t n) {
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  size_t i = 0;
  // max_ps(x, m) returns m when x is NaN, so NaN never wins.
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    m2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), m2);
    m3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), m3);
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
  float m = hmax(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

LS_AVX2 size_t argmax_avx2(const float* x, size_t n) {
  const float m = max_of_avx2(x, n);
  const __m256 vm = _mm256_set1_ps(m);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
    if (bits) return i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(bits)));
  }
  for (; i < n; ++i)
    if (x[i] == m) return i;
  return 0;  // everything NaN
}

LS_AVX2 double exp_sum_avx2(const float* x, size_t n, float shift, float scale, float* out) {
  const __m256 vs = _mm256_set1_ps(shift), vk = _mm256_set1_ps(scale);
  double total = 0.0;
  size_t i = 0;
  // Float accumulators over blocks of 1024 elements, folded into a double per block.
  while (i + 16 <= n) {
    const size_t end = (n - i >= 1024) ? i + 1024 : i + ((n - i) & ~size_t{15});
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; i < end; i += 16) {
      const __m256 y0 = exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs), vk));
      const __m256 y1 = exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vs), vk));
      _mm256_storeu_ps(out + i, y0);
      _mm256_storeu_ps(out + i + 8, y1);
      acc0 = _mm256_add_ps(acc0, y0);
      acc1 = _mm256_add_ps(acc1, y1);
    }
    total += hsum(_mm256_add_ps(acc0, acc1));
  }
  for (; i < n; ++i) total += (out[i] = exp_nonpos((x[i] - shift) * scale));
  return total;
}

LS_AVX2 size_t gather_avx2(const float* x, size_t n, float threshold, int32_t* ids, float* vals) {
  // Compare 8 at a time; only blocks with a keeper touch the outputs (usually very few).
  const __m256 vt = _mm256_set1_ps(threshold);
  size_t k = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    unsigned bits = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vt, _CMP_GE_OQ)));
    while (bits) {
      const size_t j = i + static_cast<size_t>(__builtin_ctz(bits));
      ids[k] = static_cast<int32_t>(j);
      vals[k++] = x[j];
      bits &= bits - 1;
    }
  }
  for (; i < n; ++i)
    if (x[i] >= threshold) ids[k] = static_cast<int32_t>(i), vals[k++] = x[i];
  return k;
}

LS_AVX2 size_t count_ge_avx2(const float* x, size_t n, float threshold) {
  const __m256 vt = _mm256_set1_ps(threshold);
  size_t k = 0, i = 0;
  for (; i + 8 <= n; i += 8)
    k += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vt, _CMP_GE_OQ)))));
  for (; i < n; ++i) k += x[i] >= threshold ? 1 : 0;
  return k;
}

LS_AVX2 double block_sum_avx2(const float* w, size_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_add_ps(acc0, _mm256_loadu_ps(w + i));
    acc1 = _mm256_add_ps(acc1, _mm256_loadu_ps(w + i + 8));
  }
  double s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += w[i];
  return s;
}

}  // namespace ls::sampler_kernels
