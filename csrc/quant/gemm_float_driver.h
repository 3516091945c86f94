// Tile loop of gemm_float (gemm_float.h), shared by the AVX2 and AVX-512 files: included AFTER
// the file's target pragma, inside an anonymous namespace (no COMDAT leak between ISAs).
//
// V provides: reg, kLanes, kVecs (vectors per micro-panel), kRows (rows per register tile),
// kPanels (micro-panels per packed block), zero(), load(p), store(p, v), bcast(p),
// fma(a, b, c) = a·b + c rounded once, and widen(t, src, dst, n) (n weights → fp32, exact).
//
// Loops per task (a tile of rows × kPanels·NR outputs): for each k-block of kKc inputs, pack the
// weights of the tile's outputs as fp32 [panel][k][NR] (zero columns past n_out), then for each
// kRows rows and each panel run the register tile over the k-block. Accumulators go to y between
// k-blocks and come back unchanged (fp32 stores/loads are exact), so each output still sees one
// accumulator updated in input order.
#pragma once

#include <cstdint>
#include <cstring>

#include "quant/gemm_float.h"

namespace ls::quant::gemmf {
namespace {

// No std:: templates below the target pragma: an instantiation compiled for AVX-512 could be the
// copy the linker keeps for portable callers.
inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

// Inputs per packed block: NR·kKc·4 B per panel (64 KB for a zmm panel) stays in L2 while
// every row of the task streams past it.
constexpr int64_t kKc = 256;

template <class V>
struct Driver {
  using reg = typename V::reg;
  static constexpr int NV = V::kVecs, NR = V::kVecs * V::kLanes, MR = V::kRows;
  static constexpr int64_t NC = int64_t(V::kPanels) * NR;

  // R rows × NR outputs over kc inputs. x: row stride xs; bp: [k][NR]; y: row stride ys.
  template <int R>
  static void tile(const float* x, int64_t xs, const float* bp, int64_t kc, float* y, int64_t ys, bool first) {
    reg acc[R][NV];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = first ? V::zero() : V::load(y + r * ys + v * V::kLanes);
    for (int64_t k = 0; k < kc; ++k) {
      reg b[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) b[v] = V::load(bp + k * NR + v * V::kLanes);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const reg a = V::bcast(x + r * xs + k);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = V::fma(b[v], a, acc[r][v]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) V::store(y + r * ys + v * V::kLanes, acc[r][v]);
  }

  static void tile_rows(int R, const float* x, int64_t xs, const float* bp, int64_t kc, float* y, int64_t ys,
                        bool first) {
    static_assert(MR <= 8, "tile_rows dispatches up to 8 rows");
    switch (R) {
      case 8: if constexpr (MR >= 8) { tile<8>(x, xs, bp, kc, y, ys, first); return; } [[fallthrough]];
      case 7: if constexpr (MR >= 7) { tile<7>(x, xs, bp, kc, y, ys, first); return; } [[fallthrough]];
      case 6: if constexpr (MR >= 6) { tile<6>(x, xs, bp, kc, y, ys, first); return; } [[fallthrough]];
      case 5: if constexpr (MR >= 5) { tile<5>(x, xs, bp, kc, y, ys, first); return; } [[fallthrough]];
      case 4: tile<4>(x, xs, bp, kc, y, ys, first); return;
      case 3: tile<3>(x, xs, bp, kc, y, ys, first); return;
      case 2: tile<2>(x, xs, bp, kc, y, ys, first); return;
      default: tile<1>(x, xs, bp, kc, y, ys, first); return;
    }
  }

  // Weights of outputs [o0, o0 + n_cols) × inputs [k0, k0 + kc) → bp [panel][k][NR] fp32.
  static void pack(GgmlType t, const uint8_t* w, size_t w_stride, int64_t o0, int64_t n_cols, int64_t k0,
                   int64_t kc, float* row, float* bp) {
    const size_t elem = t == GgmlType::F32 ? 4 : 2;
    const int64_t n_panels = (n_cols + NR - 1) / NR;
    for (int64_t c = 0; c < n_panels * NR; ++c) {
      float* dst = bp + (c / NR) * kc * NR + (c % NR);
      if (c < n_cols) {
        V::widen(t, w + size_t(o0 + c) * w_stride + size_t(k0) * elem, row, kc);
        for (int64_t k = 0; k < kc; ++k) dst[k * NR] = row[k];
      } else {
        for (int64_t k = 0; k < kc; ++k) dst[k * NR] = 0.0f;
      }
    }
  }

  // Rows [r0, r1) × outputs [o0, o1) (o1 - o0 ≤ NC).
  static void run_task(GgmlType t, const uint8_t* w, size_t w_stride, int64_t n_in, const float* x, int64_t r0,
                       int64_t r1, int64_t o0, int64_t o1, float* y, int64_t ys) {
    float* bp = thread_buffer(size_t(NC * kKc + kKc));  // packed block, then one widened row
    float* row = bp + NC * kKc;
    const int64_t n_cols = o1 - o0, n_panels = (n_cols + NR - 1) / NR;
    alignas(64) float part[MR * NR];  // a panel cut short by n_out goes through this tile
    for (int64_t k0 = 0; k0 < n_in; k0 += kKc) {
      const int64_t kc = imin(kKc, n_in - k0);
      const bool first = k0 == 0;
      pack(t, w, w_stride, o0, n_cols, k0, kc, row, bp);
      for (int64_t r = r0; r < r1; r += MR) {
        const int R = int(imin(MR, r1 - r));
        const float* xr = x + r * n_in + k0;
        for (int64_t p = 0; p < n_panels; ++p) {
          const float* bpp = bp + p * kc * NR;
          float* yp = y + r * ys + o0 + p * NR;
          const int64_t cols = imin(NR, n_cols - p * NR);
          if (cols == NR) {
            tile_rows(R, xr, n_in, bpp, kc, yp, ys, first);
            continue;
          }
          for (int i = 0; i < R && !first; ++i) std::memcpy(part + i * NR, yp + i * ys, sizeof(float) * size_t(cols));
          tile_rows(R, xr, n_in, bpp, kc, part, NR, first);
          for (int i = 0; i < R; ++i) std::memcpy(yp + i * ys, part + i * NR, sizeof(float) * size_t(cols));
        }
      }
    }
  }
};

}  // namespace
}  // namespace ls::quant::gemmf
