// gemm_float on AVX2 + FMA + F16C: register tile of 4 rows × 24 outputs (12 ymm accumulators, 3 weight
// vectors, one broadcast: all 16 ymm registers), packed blocks of 10 panels = 240 outputs.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/gemm_float.h"
#include "quant/quant_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "quant/gemm_float_driver.h"

namespace ls::quant::gemmf {
namespace {

struct Ymm {
  using reg = __m256;
  static constexpr int kLanes = 8, kVecs = 3, kRows = 4, kPanels = 10;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static reg bcast(const float* p) { return _mm256_set1_ps(*p); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  // n weights of type t → fp32 (exact conversions).
  static void widen(GgmlType t, const uint8_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    if (t == GgmlType::F32) {
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    }
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
      _mm256_storeu_ps(dst + i, t == GgmlType::F16
                                    ? _mm256_cvtph_ps(h)
                                    : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
    for (; i < n; ++i) dst[i] = t == GgmlType::F16 ? _cvtsh_ss(load_u16(src + 2 * i)) : bf16_to_f32(load_u16(src + 2 * i));
  }
};

void run_ymm(GgmlType t, const uint8_t* w, size_t w_stride, int64_t n_in, const float* x, int64_t r0, int64_t r1,
             int64_t o0, int64_t o1, float* y, int64_t y_stride) {
  Driver<Ymm>::run_task(t, w, w_stride, n_in, x, r0, r1, o0, o1, y, y_stride);
}

}  // namespace

Kernel kernel_avx2() { return Kernel{&run_ymm, Driver<Ymm>::NC, Ymm::kRows}; }

}  // namespace ls::quant::gemmf

#pragma GCC pop_options
