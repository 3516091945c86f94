// exp8(x, table): eight fp32 exps on AVX2 + FMA, each exactly glibc's expf (attention_exp.h).
// Kernel BODY: included after the file's target pragma ("avx2,fma" at least) and attention_exp.h,
// inside namespace ls { namespace { ... } }.

// Four exps in double precision, operation for operation glibc's expf (attention_exp.h).
inline __m128 exp4_core(__m128 x, const int64_t* tab) {
  using namespace expf_glibc;
  const __m256d xd = _mm256_cvtps_pd(x);
  const __m256d inv = _mm256_set1_pd(kInvLn2x32), shift = _mm256_set1_pd(kShift);
  const __m256d kd_shifted = _mm256_fmadd_pd(inv, xd, shift);
  const __m256i ki = _mm256_castpd_si256(kd_shifted);
  const __m256d r = _mm256_fmsub_pd(inv, xd, _mm256_sub_pd(kd_shifted, shift));
  const __m256i t = _mm256_add_epi64(
      _mm256_i64gather_epi64(reinterpret_cast<const long long*>(tab), _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8),
      _mm256_slli_epi64(ki, 47));
  const __m256d z = _mm256_fmadd_pd(r, _mm256_set1_pd(kC0), _mm256_set1_pd(kC1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(kC2), _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(z, r2, y);
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, _mm256_castsi256_pd(t)));
}

// glibc's results for |x| ≥ 88 outside the ordinary path (attention_exp.h).
inline __m256 exp8_special(__m256 x, __m256 y) {
  using namespace expf_glibc;
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(kUnderflow), _CMP_LT_OQ);
  const __m256 may = _mm256_andnot_ps(under, _mm256_cmp_ps(x, _mm256_set1_ps(kMayUnderflow), _CMP_LT_OQ));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
  y = _mm256_blendv_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(1)), may);  // smallest subnormal
  y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(kOverflow), _CMP_GT_OQ));
  return _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

inline __m256 exp8(__m256 x, const int64_t* tab) {
  const __m256 y = _mm256_set_m128(exp4_core(_mm256_extractf128_ps(x, 1), tab), exp4_core(_mm256_castps256_ps128(x), tab));
  return exp8_special(x, y);
}

