// gemm_float on AVX-512F: register tile of 6 rows × 64 outputs (24 zmm accumulators, 4 weight
// vectors, one broadcast), packed blocks of 4 panels = 256 outputs.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/gemm_float.h"
#include "quant/quant_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "quant/gemm_float_driver.h"

namespace ls::quant::gemmf {
namespace {

struct Zmm {
  using reg = __m512;
  static constexpr int kLanes = 16, kVecs = 4, kRows = 6, kPanels = 4;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  // n weights of type t → fp32 (exact conversions).
  static void widen(GgmlType t, const uint8_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    if (t == GgmlType::F32) {
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    }
    for (; i + 16 <= n; i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i));
      _mm512_storeu_ps(dst + i, t == GgmlType::F16
                                    ? _mm512_cvtph_ps(h)
                                    : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
    for (; i < n; ++i) dst[i] = t == GgmlType::F16 ? _cvtsh_ss(load_u16(src + 2 * i)) : bf16_to_f32(load_u16(src + 2 * i));
  }
};

void run_zmm(GgmlType t, const uint8_t* w, size_t w_stride, int64_t n_in, const float* x, int64_t r0, int64_t r1,
             int64_t o0, int64_t o1, float* y, int64_t y_stride) {
  Driver<Zmm>::run_task(t, w, w_stride, n_in, x, r0, r1, o0, o1, y, y_stride);
}

}  // namespace

Kernel kernel_avx512() { return Kernel{&run_zmm, Driver<Zmm>::NC, Zmm::kRows}; }

}  // namespace ls::quant::gemmf

#pragma GCC pop_options
