// Softmax numerators and row sums for the attention kernels: BODY included by
// attention_avx2.cpp and attention_avx512.cpp after their target pragma and their own
// exp8(__m256, table) (the ISA-specific part), inside namespace ls { namespace { ... } }.

// l[h] = Σ_p w[h][p] in increasing p; the G chains advance together (independent adds overlap).
template <int G>
void row_sums(const float* w, int64_t w_stride, int n, float* l) {
  float acc[G];
  for (int h = 0; h < G; ++h) acc[h] = 0.f;
  for (int p = 0; p < n; ++p)
    for (int h = 0; h < G; ++h) acc[h] += w[h * w_stride + p];
  for (int h = 0; h < G; ++h) l[h] = acc[h];
}

// w[h][p] = exp(w[h][p] - m[h]) (glibc's expf, bit for bit), then l[h] = Σ_p w[h][p].
void exp_sum_rows(float* w, int g, int64_t w_stride, int n, const float* m, float* l) {
  const int64_t* tab = expf_glibc::table();
  for (int h = 0; h < g; ++h) {
    float* row = w + h * w_stride;
    const __m256 vm = _mm256_set1_ps(m[h]);
    int p = 0;
    for (; p + 8 <= n; p += 8) _mm256_storeu_ps(row + p, exp8(_mm256_sub_ps(_mm256_loadu_ps(row + p), vm), tab));
    for (; p < n; ++p) row[p] = std::exp(row[p] - m[h]);
  }
  switch (g) {
    case 1: row_sums<1>(w, w_stride, n, l); break;
    case 2: row_sums<2>(w, w_stride, n, l); break;
    case 3: row_sums<3>(w, w_stride, n, l); break;
    default: row_sums<4>(w, w_stride, n, l); break;
  }
}
