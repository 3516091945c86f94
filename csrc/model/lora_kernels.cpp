// The two low-rank products of a LoRA term over halves as model/lora.h's LoraT stores them, for up
// to kLoraRowChunk rows per call, so one read of a half serves every row of the chunk:
//   down:   t_r[k] = Σ_i (x_r[i]·scale[i])·w[i][k]              (AT [n_in][rank], row-major)
//   up_add: y_r[o] += s_r·(scale[o]·Σ_k t_r[k]·w[k][o])         (BT [rank][n_out], in panels)
// (exact values: no scale factors). Rows go in pairs (a lone row alone); the halves are widened to
// f32 once per pair and every row keeps its own accumulators, so a row's arithmetic never depends
// on its companions. down: per column k two fused multiply-add chains over i (even and odd i; a last
// odd i goes to the even chain), then even + odd. up_add: per output o one chain over ascending k
// from 0, then scale[o]·u, then s·that, then y + that — plain multiplies and adds (the rounding of
// s·u first: llama.cpp's ggml_scale then ggml_add). The SIMD lanes and the scalar tails of up_add
// do exactly this per output, so any split of outputs gives the same bits. Which path (AVX2 or
// portable) is fixed per process (quant's active ISA); the portable path has the same chains.
// GCC contracts a vector multiply feeding an add into one FMA by default (-ffp-contract=fast, even
// for _mm256_mul_ps / _mm256_add_ps), which would round s·u together with the add in the SIMD
// lanes but not in the scalar tails; the chains above that want FMAs call them explicitly.
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "common/fp16.h"
#include "model/lora.h"
#include "quant/quant.h"

namespace ls {
namespace {

// How far ahead of the kernels' reads the halves are prefetched (about what one core keeps in
// flight from memory): a half is a few KB read once per step, too short for the hardware
// prefetcher to ramp up. Prefetching past a half's end is harmless.
constexpr int64_t kPrefetchBytes = 4096;

// The element types of LoraT: int8 (with scales), IEEE half and f32 (without).
struct I8 {
  using T = int8_t;
  static constexpr bool kScaled = true;
  static float one(const T* p) { return float(*p); }
  __attribute__((target("avx2,fma,f16c"))) static __m256 eight(const T* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
};
struct F16 {
  using T = uint16_t;
  static constexpr bool kScaled = false;
  static float one(const T* p) { return fp16_to_f32(*p); }
  __attribute__((target("avx2,fma,f16c"))) static __m256 eight(const T* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};

struct F32 {
  using T = float;
  static constexpr bool kScaled = false;
  static float one(const T* p) { return *p; }
  __attribute__((target("avx2,fma,f16c"))) static __m256 eight(const T* p) { return _mm256_loadu_ps(p); }
};

// x_r[i]·scale[i] (int8) or x_r[i].
template <class E>
inline float x_at(const LoraT& at, const float* x, int64_t i) {
  if constexpr (E::kScaled) {
    const __m128 v = _mm_mul_ss(_mm_set_ss(x[i]), _mm_set_ss(at.scale[i]));  // intrinsics: no contraction
    return _mm_cvtss_f32(v);
  } else {
    return x[i];
  }
}

// ---- portable ----
// Column k of one row's t: two chains (even and odd i) added at the end (the portable path and
// the AVX2 path's columns beyond its 8-wide blocks).
template <class E>
inline float down_one(const LoraT& at, const float* x, int64_t k) {
  const int64_t n_in = at.rows, r = at.cols;
  const auto* w = static_cast<const typename E::T*>(at.data);
  float even = 0.f, odd = 0.f;
  int64_t i = 0;
  for (; i + 2 <= n_in; i += 2) {
    even = std::fma(x_at<E>(at, x, i), E::one(w + i * r + k), even);
    odd = std::fma(x_at<E>(at, x, i + 1), E::one(w + (i + 1) * r + k), odd);
  }
  if (i < n_in) even = std::fma(x_at<E>(at, x, i), E::one(w + i * r + k), even);
  return _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(even), _mm_set_ss(odd)));
}

template <class E>
void down_portable(const LoraT& at, const float* const* xs, float* const* ts, int n_rows) {
  for (int row = 0; row < n_rows; ++row)
    for (int64_t k = 0; k < at.cols; ++k) ts[row][k] = down_one<E>(at, xs[row], k);
}

// y + s·u, the multiply rounded first (intrinsics: no contraction).
inline float add_scaled(float y, float s, float u) {
  return _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(y), _mm_mul_ss(_mm_set_ss(s), _mm_set_ss(u))));
}

// The up kernels either add s·u to y (kAdd) or store u for a later lora_add (side tasks).
// One output of one row (the portable path and the AVX2 path's scalar tail).
template <class E, bool kAdd>
inline void up_one(const LoraT& bt, const float* t, float s, float* y, int64_t o) {
  const int64_t r = bt.rows, n_out = bt.cols;
  const auto* w = static_cast<const typename E::T*>(bt.data);
  float acc = 0.f;
  for (int64_t k = 0; k < r; ++k) acc = std::fma(t[k], E::one(w + lora_panel_index(k, o, r, n_out)), acc);
  __m128 u = _mm_set_ss(acc);  // intrinsics: no contraction
  if constexpr (E::kScaled) u = _mm_mul_ss(_mm_set_ss(bt.scale[o]), u);
  y[o] = kAdd ? add_scaled(y[o], s, _mm_cvtss_f32(u)) : _mm_cvtss_f32(u);
}

template <class E, bool kAdd>
void up_portable(const LoraT& bt, const float* const* ts, const float* ss, float* const* ys, int n_rows, int64_t o0,
                 int64_t o1) {
  for (int row = 0; row < n_rows; ++row)
    for (int64_t o = o0; o < o1; ++o) up_one<E, kAdd>(bt, ts[row], ss ? ss[row] : 0.f, ys[row], o);
}

// ---- AVX2 + FMA (+ F16C) ----
// Columns k0 .. k0+8W of R rows' t, with the two chains per column as the portable path.
template <class E, int R, int W>
__attribute__((target("avx2,fma,f16c"))) void down_block(const LoraT& at, const float* const* xs, float* const* ts,
                                                         int64_t k0) {
  const int64_t n_in = at.rows, r = at.cols;
  const auto* w = static_cast<const typename E::T*>(at.data);
  __m256 even[R][W], odd[R][W];
  for (int row = 0; row < R; ++row)
    for (int v = 0; v < W; ++v) even[row][v] = odd[row][v] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 2 <= n_in; i += 2) {
    _mm_prefetch(reinterpret_cast<const char*>(w + i * r) + kPrefetchBytes, _MM_HINT_T0);
    __m256 we[W], wo[W];
    for (int v = 0; v < W; ++v) {
      we[v] = E::eight(w + i * r + k0 + 8 * v);
      wo[v] = E::eight(w + (i + 1) * r + k0 + 8 * v);
    }
    for (int row = 0; row < R; ++row) {
      const __m256 xe = _mm256_set1_ps(x_at<E>(at, xs[row], i)), xo = _mm256_set1_ps(x_at<E>(at, xs[row], i + 1));
      for (int v = 0; v < W; ++v) {
        even[row][v] = _mm256_fmadd_ps(xe, we[v], even[row][v]);
        odd[row][v] = _mm256_fmadd_ps(xo, wo[v], odd[row][v]);
      }
    }
  }
  if (i < n_in)
    for (int v = 0; v < W; ++v) {
      const __m256 we = E::eight(w + i * r + k0 + 8 * v);
      for (int row = 0; row < R; ++row)
        even[row][v] = _mm256_fmadd_ps(_mm256_set1_ps(x_at<E>(at, xs[row], i)), we, even[row][v]);
    }
  for (int row = 0; row < R; ++row)
    for (int v = 0; v < W; ++v) _mm256_storeu_ps(ts[row] + k0 + 8 * v, _mm256_add_ps(even[row][v], odd[row][v]));
}

template <class E, int R>
__attribute__((target("avx2,fma,f16c"))) void down_rows(const LoraT& at, const float* const* xs, float* const* ts) {
  const int64_t r = at.cols;
  int64_t k0 = 0;
  for (; k0 + 16 <= r; k0 += 16) down_block<E, R, 2>(at, xs, ts, k0);
  for (; k0 + 8 <= r; k0 += 8) down_block<E, R, 1>(at, xs, ts, k0);
  for (; k0 < r; ++k0)  // a rank that is not a multiple of 8: its last columns one by one
    for (int row = 0; row < R; ++row) ts[row][k0] = down_one<E>(at, xs[row], k0);
}

// Outputs o .. o+8V of R rows: one chain per output over ascending k. w points at (k = 0, o) in its
// panel and w + k·width at (k, o).
template <class E, bool kAdd, int R, int V>
__attribute__((target("avx2,fma,f16c"))) void up_block(const LoraT& bt, const typename E::T* w, int64_t width,
                                                       const float* const* ts, const float* ss, float* const* ys,
                                                       int64_t o) {
  const int64_t r = bt.rows;
  __m256 acc[R][V];
  for (int row = 0; row < R; ++row)
    for (int v = 0; v < V; ++v) acc[row][v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < r; ++k) {
    _mm_prefetch(reinterpret_cast<const char*>(w + k * width) + kPrefetchBytes, _MM_HINT_T0);
    __m256 wk[V];
    for (int v = 0; v < V; ++v) wk[v] = E::eight(w + k * width + 8 * v);
    for (int row = 0; row < R; ++row) {
      const __m256 tk = _mm256_set1_ps(ts[row][k]);
      for (int v = 0; v < V; ++v) acc[row][v] = _mm256_fmadd_ps(tk, wk[v], acc[row][v]);
    }
  }
  for (int v = 0; v < V; ++v)
    for (int row = 0; row < R; ++row) {  // mul, mul, add: never fused (the rounding of s·u first)
      __m256 u = acc[row][v];
      if constexpr (E::kScaled) u = _mm256_mul_ps(_mm256_loadu_ps(bt.scale + o + 8 * v), u);
      float* y = ys[row] + o + 8 * v;
      if constexpr (kAdd) u = _mm256_add_ps(_mm256_loadu_ps(y), _mm256_mul_ps(_mm256_set1_ps(ss[row]), u));
      _mm256_storeu_ps(y, u);
    }
}

template <class E, bool kAdd, int R>
__attribute__((target("avx2,fma,f16c"))) void up_rows(const LoraT& bt, const float* const* ts, const float* ss,
                                                      float* const* ys, int64_t o0, int64_t o1) {
  const int64_t r = bt.rows, n_out = bt.cols;
  for (int64_t o = o0; o < o1;) {  // panel by panel
    const int64_t p0 = o / kLoraPanel * kLoraPanel, width = std::min<int64_t>(kLoraPanel, n_out - p0);
    const int64_t end = std::min(o1, p0 + width);
    const auto* panel = static_cast<const typename E::T*>(bt.data) + p0 * r;
    for (; o + 32 <= end; o += 32) up_block<E, kAdd, R, 4>(bt, panel + (o - p0), width, ts, ss, ys, o);
    for (; o + 8 <= end; o += 8) up_block<E, kAdd, R, 1>(bt, panel + (o - p0), width, ts, ss, ys, o);
    for (; o < end; ++o)
      for (int row = 0; row < R; ++row) up_one<E, kAdd>(bt, ts[row], kAdd ? ss[row] : 0.f, ys[row], o);
  }
}

template <class E>
__attribute__((target("avx2,fma,f16c"))) void down_avx2(const LoraT& at, const float* const* xs, float* const* ts,
                                                        int n_rows) {
  int row = 0;
  for (; row + 2 <= n_rows; row += 2) down_rows<E, 2>(at, xs + row, ts + row);
  if (row < n_rows) down_rows<E, 1>(at, xs + row, ts + row);
}

template <class E, bool kAdd>
__attribute__((target("avx2,fma,f16c"))) void up_avx2(const LoraT& bt, const float* const* ts, const float* ss,
                                                      float* const* ys, int n_rows, int64_t o0, int64_t o1) {
  int row = 0;
  for (; row + 2 <= n_rows; row += 2) up_rows<E, kAdd, 2>(bt, ts + row, kAdd ? ss + row : nullptr, ys + row, o0, o1);
  if (row < n_rows) up_rows<E, kAdd, 1>(bt, ts + row, kAdd ? ss + row : nullptr, ys + row, o0, o1);
}

template <bool kAdd>
void up_any(const LoraT& bt, const float* const* ts, const float* ss, float* const* ys, int n_rows, int64_t o0,
            int64_t o1) {
  const bool simd = active_isa() != Isa::Scalar;
  switch (bt.elem) {
    case LoraElem::I8:
      return simd ? up_avx2<I8, kAdd>(bt, ts, ss, ys, n_rows, o0, o1) : up_portable<I8, kAdd>(bt, ts, ss, ys, n_rows, o0, o1);
    case LoraElem::F16:
      return simd ? up_avx2<F16, kAdd>(bt, ts, ss, ys, n_rows, o0, o1)
                  : up_portable<F16, kAdd>(bt, ts, ss, ys, n_rows, o0, o1);
    case LoraElem::F32:
      return simd ? up_avx2<F32, kAdd>(bt, ts, ss, ys, n_rows, o0, o1)
                  : up_portable<F32, kAdd>(bt, ts, ss, ys, n_rows, o0, o1);
  }
}

// y + s·u over n floats, as the kAdd kernels' last step (multiply, then add).
__attribute__((target("avx2,fma,f16c"))) void add_avx2(float* y, const float* u, float s, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(sv, _mm256_loadu_ps(u + i))));
  for (; i < n; ++i) y[i] = add_scaled(y[i], s, u[i]);
}

}  // namespace

void lora_down(const LoraT& at, const float* const* xs, float* const* ts, int n_rows) {
  const bool simd = active_isa() != Isa::Scalar;  // every SIMD path has AVX2+FMA+F16C
  switch (at.elem) {
    case LoraElem::I8: return simd ? down_avx2<I8>(at, xs, ts, n_rows) : down_portable<I8>(at, xs, ts, n_rows);
    case LoraElem::F16: return simd ? down_avx2<F16>(at, xs, ts, n_rows) : down_portable<F16>(at, xs, ts, n_rows);
    case LoraElem::F32: return simd ? down_avx2<F32>(at, xs, ts, n_rows) : down_portable<F32>(at, xs, ts, n_rows);
  }
}

void lora_up_add(const LoraT& bt, const float* const* ts, const float* ss, float* const* ys, int n_rows, int64_t o0,
                 int64_t o1) {
  up_any<true>(bt, ts, ss, ys, n_rows, o0, o1);
}

void lora_up(const LoraT& bt, const float* const* ts, float* const* us, int n_rows, int64_t o0, int64_t o1) {
  up_any<false>(bt, ts, nullptr, us, n_rows, o0, o1);
}

void lora_add(float* y, const float* u, float s, int64_t n) {
  if (active_isa() != Isa::Scalar) return add_avx2(y, u, s, n);
  for (int64_t i = 0; i < n; ++i) y[i] = add_scaled(y[i], s, u[i]);
}

}  // namespace ls
