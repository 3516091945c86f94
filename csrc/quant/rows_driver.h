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

// Software prefetch of a weight stream, in two hops: far ahead into L2 (T2), near ahead into L1
// (T0). Decode reads every weight once per step, so the kernel must keep DRAM reads in flight while
// it computes. Measured here (2-thread GEMV, 1 GiB of interleaved 2048 x 8192 matrices): T0 alone at
// 10 KiB read Q4_K / Q6_K at 28 / 28 GB/s; both hops, alternating line by line, 34 / 31 GB/s, about
// the machine's pure read bandwidth (an AVX-512 load loop: 34-36 GB/s); both hops as two separate
// runs of prefetches, 29-31 / 28. In prefill the T0 hop also puts the o-block in L1 and L2, where
// every activation tile re-reads it.
constexpr size_t kPrefetchBytes = 10240;
constexpr size_t kNearPrefetchBytes = 4096;
// Weight bytes per o-block in prefill: re-read from L2 for every 4-row activation tile.
constexpr size_t kOBlockBytes = 64 * 1024;

// Every cache line of [p, p + bytes) (rows are not line-aligned); Locality as __builtin_prefetch's
// (3: T0, 1: T2).
template <int Locality>
inline void prefetch_lines(const uint8_t* p, size_t bytes) {
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  for (uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(63); a < end; a += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(a), 0, Locality);
}

// While [p, p + bytes) is being read: the bytes the two hops ahead.
inline void prefetch_ahead(const uint8_t* p, size_t bytes) {
  const uintptr_t far = reinterpret_cast<uintptr_t>(p) + kPrefetchBytes, end = far + bytes;
  for (uintptr_t a = far & ~uintptr_t(63); a < end; a += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(a), 0, 1);
    __builtin_prefetch(reinterpret_cast<const void*>(a - (kPrefetchBytes - kNearPrefetchBytes)), 0, 3);
  }
}

// Before reading a range of range_bytes from p: its start, otherwise demand-missed (matters for
// small matrices and for each thread's share of a split one).
inline void prefetch_start(const uint8_t* p, size_t range_bytes) {
  prefetch_lines<3>(p, range_bytes < kNearPrefetchBytes ? range_bytes : kNearPrefetchBytes);
  if (range_bytes > kNearPrefetchBytes)
    prefetch_lines<1>(p + kNearPrefetchBytes,
                      (range_bytes < kPrefetchBytes ? range_bytes : kPrefetchBytes) - kNearPrefetchBytes);
}

template <class K>
void run_rows(const uint8_t* w, size_t w_stride, int64_t o0, int64_t o1, const ActView& a, float* y,
              int64_t y_stride) {
  int64_t pf = int64_t(kPrefetchBytes / w_stride);
  if (pf < 1) pf = 1;
  int64_t ob = a.n_rows <= 1 ? (o1 - o0) : int64_t(kOBlockBytes / w_stride);
  if (ob < 1) ob = 1;
  float out[4];
  prefetch_start(w + size_t(o0) * w_stride, size_t(o1 - o0) * w_stride);
  for (int64_t ob0 = o0; ob0 < o1; ob0 += ob) {
    const int64_t ob1 = ob0 + ob < o1 ? ob0 + ob : o1;
    for (int64_t r = 0; r < a.n_rows; r += 4) {
      const int64_t R = a.n_rows - r < 4 ? a.n_rows - r : 4;
      for (int64_t o = ob0; o < ob1; ++o) {
        const uint8_t* wrow = w + size_t(o) * w_stride;
        if (r == 0 && o + pf < o1) prefetch_ahead(wrow, w_stride);
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
