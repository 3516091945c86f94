// Loop driver of the row-interleaved kernels, shared by every ISA file: included after the
// file's target pragma (as rows_driver.h), so the tiles inline into it.
//
// K must provide: kMaxR (activation rows per tile), kHalves (passes over a 16-row group: 1 for
// 512-bit kernels, 2 for 256-bit ones, 8 rows each), kBlockElems (32 or 256), group_bytes(w_stride,
// n_in), and template <int R> static void tile(const uint8_t* group, int half, int64_t n_blocks,
// const ActView& a, int64_t r, float* y, int64_t y_stride, bool prefetch) writing rows r..r+R-1
// of y for the group's outputs.
#pragma once

#include "quant/quant_internal.h"
#include "quant/rows_driver.h"

namespace ls::quant {
namespace {

// tile<R> for the runtime row count n ≤ R.
template <class K, int R>
inline void il_tile(int64_t n, const uint8_t* gp, int h, int64_t nb, const ActView& a, int64_t r, float* y,
                    int64_t y_stride, bool pf) {
  if constexpr (R > 1) {
    if (n < R) return il_tile<K, R - 1>(n, gp, h, nb, a, r, y, y_stride, pf);
  }
  K::template tile<R>(gp, h, nb, a, r, y, y_stride, pf);
}

template <class K>
void run_il_groups(const uint8_t* w, size_t w_stride, int64_t o0, int64_t o1, const ActView& a, float* y,
                   int64_t y_stride) {
  const int64_t nb = a.n_in / K::kBlockElems;
  const size_t group_bytes = K::group_bytes(w_stride, a.n_in);
  prefetch_start(w + size_t(o0 / kInterleaveRows) * group_bytes, size_t((o1 - o0) / kInterleaveRows) * group_bytes);
  for (int64_t g = o0 / kInterleaveRows; g < o1 / kInterleaveRows; ++g) {
    const uint8_t* gp = w + size_t(g) * group_bytes;
    float* yg = y + g * kInterleaveRows;
    for (int h = 0; h < K::kHalves; ++h) {
      for (int64_t r = 0; r < a.n_rows; r += K::kMaxR) {
        const int64_t R = a.n_rows - r < K::kMaxR ? a.n_rows - r : K::kMaxR;
        il_tile<K, K::kMaxR>(R, gp, h, nb, a, r, yg, y_stride, r == 0 && h == 0);
      }
    }
  }
}

}  // namespace
}  // namespace ls::quant
