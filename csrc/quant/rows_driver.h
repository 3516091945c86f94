// Loop driver shared by every ISA file: included AFTER the file's target pragma so the
// per-type dot kernels inline into it. Everything here has internal linkage (anonymous
// namespace), so no ISA-specific code can leak into another translation unit via COMDAT.
//
// K must provide: template <int R> static void dot(const uint8_t* wrow, const ActView& a,
// int64_t r, float* out) computing out[i] = <weight row, activation row r+i> for i < R.
// A kernel must perform the same float operations for a given (row, activation row) pair
// whatever R is, so GEMV and tiled GEMM results are bit-identical.
#pragma once

#include "quant/quant_internal.h"

namespace ls::quant {
namespace {

// Prefetch distance in bytes (measured here: ~16 rows / ~10 KB ahead of the row being read
// recovers ~80% GEMV bandwidth on this machine).
constexpr size_t kPrefetchBytes = 10240;
// Weight bytes per o-block in prefill: re-read from L2 for every 4-row activation tile.
constexpr size_t kOBlockBytes = 64 * 1024;

// T0 (into L1 and L2), not NTA: in prefill the o-block is re-read from L2 for every tile.
// Covers every cache line of [p, p + bytes) (rows are not line-aligned).
inline void prefetch_row(const uint8_t* p, size_t bytes) {
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  for (uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(63); a < end; a += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(a), 0, 3);
}

template <class K>
void run_rows(const uint8_t* w, size_t w_stride, int64_t o0, int64_t o1, const ActView& a, float* y,
              int64_t y_stride) {
  int64_t pf = int64_t(kPrefetchBytes / w_stride);
  if (pf < 1) pf = 1;
  int64_t ob = a.n_rows <= 1 ? (o1 - o0) : int64_t(kOBlockBytes / w_stride);
  if (ob < 1) ob = 1;
  float out[4];
  // Prologue: the first pf rows are otherwise demand-missed (matters for 192-row matrices).
  prefetch_row(w + size_t(o0) * w_stride, size_t((o1 - o0 < pf ? o1 - o0 : pf)) * w_stride);
  for (int64_t ob0 = o0; ob0 < o1; ob0 += ob) {
    const int64_t ob1 = ob0 + ob < o1 ? ob0 + ob : o1;
    for (int64_t r = 0; r < a.n_rows; r += 4) {
      const int64_t R = a.n_rows - r < 4 ? a.n_rows - r : 4;
      for (int64_t o = ob0; o < ob1; ++o) {
        const uint8_t* wrow = w + size_t(o) * w_stride;
        if (r == 0 && o + pf < o1) prefetch_row(wrow + size_t(pf) * w_stride, w_stride);
        switch (R) {
          case 4: K::template dot<4>(wrow, a, r, out); break;
          case 3: K::template dot<3>(wrow, a, r, out); break;
          case 2: K::template dot<2>(wrow, a, r, out); break;
          default: K::template dot<1>(wrow, a, r, out); break;
        }
        for (int64_t i = 0; i < R; ++i) y[(r + i) * y_stride + o] = out[i];
      }
    }
  }
}

}  // namespace
}  // namespace ls::quant
