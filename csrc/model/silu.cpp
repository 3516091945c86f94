// SwiGLU of the llama-family feed-forward block: a = silu(a) ⊙ b = a / (1 + expf(−a)) · b.
//
// libm's scalar expf per element was ~7% of a 1B model's prefill and ~3% of its decode. The AVX2 path
// evaluates eight expf at once with glibc's own algorithm (expf_avx2.h, bit for bit glibc's FMA build,
// which the portable loop calls on these CPUs) and then the same float negate, add, divide and multiply,
// so it returns the portable loop's bits (tests/csrc/model/silu_check.cpp sweeps both signs). Each element
// depends only on its own a and b: the same for any batch split, thread count or path.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "common/cpu_features.h"
#include "model/attention_exp.h"
#include "model/ops.h"

namespace ls {

void silu_mul_portable(float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
}

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace {

#include "model/expf_avx2.h"

void silu_mul_avx2(float* a, const float* b, int64_t n) {
  const int64_t* tab = expf_glibc::table();
  const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(a + i);
    const __m256 d = _mm256_add_ps(one, exp8(_mm256_xor_ps(x, sign), tab));  // −x flips the sign bit, as the loop
    _mm256_storeu_ps(a + i, _mm256_mul_ps(_mm256_div_ps(x, d), _mm256_loadu_ps(b + i)));
  }
  silu_mul_portable(a + i, b + i, n - i);
}

}  // namespace
#pragma GCC pop_options

void silu_mul(float* a, const float* b, int64_t n) {
  static const bool use_avx2 = cpu_features().avx2;
  if (use_avx2) silu_mul_avx2(a, b, n);
  else silu_mul_portable(a, b, n);
}

}  // namespace ls
