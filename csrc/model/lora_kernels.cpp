// The two low-rank products of a LoRA term, over halves stored transposed (model/lora.h LoraT):
//   down:   t[k] = Σ_i x[i]·AT[i][k]            (AT [n_in][rank])
//   up_add: y[o] += s·(Σ_k t[k]·BT[k][o])        (BT [rank][n_out])
// Both are axpy loops over contiguous rows (a rank-wide and an output-wide vector), which is why
// the halves are transposed at load: the row-dot kernels of quant/ run 16-element rows at a
// fraction of their speed. up_add's elements are sequential sums in ascending k; down's, on the
// AVX2 path, 8/W interleaved sums over i (down_block) added in a fixed order; fused multiply-adds
// on the AVX2 path (scalar tails too: std::fma), plain multiply-then-add on the portable path; the
// final y + s·u rounds s·u first (llama.cpp's ggml_scale then ggml_add). So an element's value
// does not depend on how rows or outputs are split, only on the path, which is fixed per process
// (quant's active ISA).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "model/lora.h"
#include "quant/quant.h"

namespace ls {
namespace {

inline float load_scalar(const LoraT& m, int64_t i) {
  if (m.f16) {
    uint16_t h;
    std::memcpy(&h, static_cast<const uint8_t*>(m.data) + 2 * i, 2);
    return fp16_to_f32(h);
  }
  return static_cast<const float*>(m.data)[i];
}

// ---- portable ----
void down_portable(const LoraT& at, const float* x, float* t) {
  const int64_t n_in = at.rows, r = at.cols;
  for (int64_t k = 0; k < r; ++k) t[k] = 0.f;
  for (int64_t i = 0; i < n_in; ++i)
    for (int64_t k = 0; k < r; ++k) t[k] = t[k] + x[i] * load_scalar(at, i * r + k);
}

void up_add_portable(const LoraT& bt, const float* t, float s, float* y, int64_t o0, int64_t o1) {
  const int64_t r = bt.rows, n_out = bt.cols;
  for (int64_t o = o0; o < o1; ++o) {
    float acc = 0.f;
    for (int64_t k = 0; k < r; ++k) acc = acc + t[k] * load_scalar(bt, k * n_out + o);
    const float d = s * acc;
    y[o] = y[o] + d;
  }
}

// ---- AVX2 + FMA + F16C ----
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const LoraT& m, int64_t i) {
  if (m.f16) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
      static_cast<const uint16_t*>(m.data) + i)));
  return _mm256_loadu_ps(static_cast<const float*>(m.data) + i);
}

__attribute__((target("avx2,fma,f16c"))) inline float load1(const LoraT& m, int64_t i) {
  if (m.f16) return _cvtsh_ss(static_cast<const uint16_t*>(m.data)[i]);
  return static_cast<const float*>(m.data)[i];
}

// Columns k0 .. k0+8W of t = x·AT with 8 independent FMA chains: W column vectors × U = 8/W
// interleaved streams of i (i ≡ u mod U), summed u = 0..U-1 at the end. A rank-16 A alone gave
// two chains of n_in dependent FMAs (latency-bound at a quarter of the FMA rate).
template <int W>
__attribute__((target("avx2,fma,f16c"))) void down_block(const LoraT& at, const float* x, float* t, int64_t k0) {
  constexpr int U = 8 / W;
  const int64_t n_in = at.rows, r = at.cols;
  __m256 acc[U][W];
  for (auto& row : acc)
    for (auto& a : row) a = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + U <= n_in; i += U)
    for (int u = 0; u < U; ++u) {
      const __m256 xi = _mm256_set1_ps(x[i + u]);
      for (int w = 0; w < W; ++w) acc[u][w] = _mm256_fmadd_ps(xi, load8(at, (i + u) * r + k0 + 8 * w), acc[u][w]);
    }
  for (; i < n_in; ++i) {
    const __m256 xi = _mm256_set1_ps(x[i]);
    for (int w = 0; w < W; ++w) acc[0][w] = _mm256_fmadd_ps(xi, load8(at, i * r + k0 + 8 * w), acc[0][w]);
  }
  for (int w = 0; w < W; ++w) {
    __m256 sum = acc[0][w];
    for (int u = 1; u < U; ++u) sum = _mm256_add_ps(sum, acc[u][w]);
    _mm256_storeu_ps(t + k0 + 8 * w, sum);
  }
}

__attribute__((target("avx2,fma,f16c"))) void down_avx2(const LoraT& at, const float* x, float* t) {
  const int64_t n_in = at.rows, r = at.cols;
  int64_t k0 = 0;
  for (; k0 + 64 <= r; k0 += 64) down_block<8>(at, x, t, k0);
  for (; k0 + 32 <= r; k0 += 32) down_block<4>(at, x, t, k0);
  for (; k0 + 16 <= r; k0 += 16) down_block<2>(at, x, t, k0);
  for (; k0 + 8 <= r; k0 += 8) down_block<1>(at, x, t, k0);
  for (; k0 < r; ++k0) {
    float acc = 0.f;
    for (int64_t i = 0; i < n_in; ++i) acc = std::fma(x[i], load1(at, i * r + k0), acc);
    t[k0] = acc;
  }
}

__attribute__((target("avx2,fma,f16c"))) void up_add_avx2(const LoraT& bt, const float* t, float s, float* y,
                                                          int64_t o0, int64_t o1) {
  const int64_t r = bt.rows, n_out = bt.cols;
  const __m256 sv = _mm256_set1_ps(s);
  int64_t o = o0;
  for (; o + 64 <= o1; o += 64) {  // 8 independent chains: the FMA rate, not its latency
    __m256 acc[8];
    for (auto& a : acc) a = _mm256_setzero_ps();
    for (int64_t k = 0; k < r; ++k) {
      const __m256 tk = _mm256_set1_ps(t[k]);
      for (int v = 0; v < 8; ++v) acc[v] = _mm256_fmadd_ps(tk, load8(bt, k * n_out + o + 8 * v), acc[v]);
    }
    for (int v = 0; v < 8; ++v)
      _mm256_storeu_ps(y + o + 8 * v, _mm256_add_ps(_mm256_loadu_ps(y + o + 8 * v), _mm256_mul_ps(sv, acc[v])));
  }
  for (; o + 32 <= o1; o += 32) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t k = 0; k < r; ++k) {
      const __m256 tk = _mm256_set1_ps(t[k]);
      for (int v = 0; v < 4; ++v) acc[v] = _mm256_fmadd_ps(tk, load8(bt, k * n_out + o + 8 * v), acc[v]);
    }
    for (int v = 0; v < 4; ++v)  // mul then add: never fused (the rounding of s·u first)
      _mm256_storeu_ps(y + o + 8 * v, _mm256_add_ps(_mm256_loadu_ps(y + o + 8 * v), _mm256_mul_ps(sv, acc[v])));
  }
  for (; o + 8 <= o1; o += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t k = 0; k < r; ++k) acc = _mm256_fmadd_ps(_mm256_set1_ps(t[k]), load8(bt, k * n_out + o), acc);
    _mm256_storeu_ps(y + o, _mm256_add_ps(_mm256_loadu_ps(y + o), _mm256_mul_ps(sv, acc)));
  }
  for (; o < o1; ++o) {
    float acc = 0.f;
    for (int64_t k = 0; k < r; ++k) acc = std::fma(t[k], load1(bt, k * n_out + o), acc);
    const __m128 d = _mm_mul_ss(_mm_set_ss(s), _mm_set_ss(acc));  // intrinsics: no contraction
    y[o] = _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(y[o]), d));
  }
}

}  // namespace

void lora_down(const LoraT& at, const float* x, float* t) {
  if (active_isa() != Isa::Scalar) down_avx2(at, x, t);  // every SIMD path has AVX2+FMA+F16C
  else down_portable(at, x, t);
}

void lora_up_add(const LoraT& bt, const float* t, float s, float* y, int64_t o0, int64_t o1) {
  if (active_isa() != Isa::Scalar) up_add_avx2(bt, t, s, y, o0, o1);
  else up_add_portable(bt, t, s, y, o0, o1);
}

}  // namespace ls
