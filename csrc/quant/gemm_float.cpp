// gemm_float (gemm_float.h): ISA choice, the task grid over the pool, the scalar reference.
#include "quant/gemm_float.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <cstring>

#include "quant/quant_internal.h"

namespace ls {
namespace quant::gemmf {
namespace {

float weight_at(GgmlType t, const uint8_t* row, int64_t i) {
  if (t == GgmlType::F32) {
    float f;
    std::memcpy(&f, row + 4 * i, 4);
    return f;
  }
  return t == GgmlType::F16 ? fp16_to_f32(load_u16(row + 2 * i)) : bf16_to_f32(load_u16(row + 2 * i));
}

// The reference: the contract's order written out (std::fma rounds once, as the SIMD FMAs do).
void run_scalar(GgmlType t, const uint8_t* w, size_t w_stride, int64_t n_in, const float* x, int64_t r0, int64_t r1,
                int64_t o0, int64_t o1, float* y, int64_t y_stride) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t o = o0; o < o1; ++o) {
      const uint8_t* row = w + size_t(o) * w_stride;
      float acc = 0.0f;
      for (int64_t i = 0; i < n_in; ++i) acc = std::fma(weight_at(t, row, i), x[r * n_in + i], acc);
      y[r * y_stride + o] = acc;
    }
}

Kernel active_kernel() {
  switch (active_isa()) {
    case Isa::Avx512Vnni: return kernel_avx512();  // usable ⇒ AVX-512 F/BW/VL executed here
    case Isa::Avx2:
    case Isa::AvxVnni: return kernel_avx2();  // usable ⇒ AVX2 + FMA + F16C executed here
    default: return Kernel{&run_scalar, 64, 4};
  }
}

struct ThreadBuffer {
  float* p = nullptr;
  size_t n = 0;
  ~ThreadBuffer() { std::free(p); }
};

}  // namespace

float* thread_buffer(size_t n) {
  thread_local ThreadBuffer buf;
  if (buf.n < n) {
    std::free(buf.p);
    buf.p = static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) & ~size_t(63)));
    buf.n = buf.p ? n : 0;
    if (!buf.p) throw std::bad_alloc();
  }
  return buf.p;
}

}  // namespace quant::gemmf

bool gemm_float_supported(GgmlType wt) {
  return wt == GgmlType::F32 || wt == GgmlType::F16 || wt == GgmlType::BF16;
}

void gemm_float(ThreadPool& pool, GgmlType wt, const void* w, int64_t n_in, int64_t n_out, const float* x,
                int64_t n_rows, float* y, int64_t y_stride) {
  if (!gemm_float_supported(wt)) throw std::invalid_argument("gemm_float: weights must be F32, F16 or BF16");
  if (n_in <= 0 || n_out <= 0 || n_rows <= 0) return;
  const quant::gemmf::Kernel k = quant::gemmf::active_kernel();
  const size_t w_stride = ggml_row_bytes(wt, n_in);
  // Task grid: column tiles of one packed block each; when they are few and the pool has several
  // threads, rows are cut too (each cut repacks the weights once more, so row tiles stay ≥ 8
  // register tiles; one thread gains nothing from cuts). No split changes any output's summation
  // order, so the bits never depend on the grid.
  const int64_t col_tiles = (n_out + k.cols_per_task - 1) / k.cols_per_task;
  const int64_t min_rows = 8 * int64_t(k.rows_per_tile);
  int64_t row_tiles = pool.num_threads() == 1 ? 1 : (8 + col_tiles - 1) / col_tiles;
  row_tiles = std::max<int64_t>(1, std::min(row_tiles, n_rows / min_rows));
  int64_t rows_per = (n_rows + row_tiles - 1) / row_tiles;
  rows_per = (rows_per + k.rows_per_tile - 1) / k.rows_per_tile * k.rows_per_tile;
  row_tiles = (n_rows + rows_per - 1) / rows_per;
  const auto* wb = static_cast<const uint8_t*>(w);
  pool.parallel_for(row_tiles * col_tiles, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r0 = (t / col_tiles) * rows_per, o0 = (t % col_tiles) * k.cols_per_task;
      k.run(wt, wb, w_stride, n_in, x, r0, std::min(n_rows, r0 + rows_per), o0, std::min(n_out, o0 + k.cols_per_task),
            y, y_stride);
    }
  });
}

void gemm_float_serial(GgmlType wt, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t n_rows,
                       float* y, int64_t y_stride) {
  if (!gemm_float_supported(wt)) throw std::invalid_argument("gemm_float: weights must be F32, F16 or BF16");
  if (n_in <= 0 || n_out <= 0 || n_rows <= 0) return;
  const quant::gemmf::Kernel k = quant::gemmf::active_kernel();
  const size_t w_stride = ggml_row_bytes(wt, n_in);
  // One task per column tile over all rows: each packed block is built once.
  for (int64_t o0 = 0; o0 < n_out; o0 += k.cols_per_task)
    k.run(wt, static_cast<const uint8_t*>(w), w_stride, n_in, x, 0, n_rows, o0, std::min(n_out, o0 + k.cols_per_task), y,
          y_stride);
}

}  // namespace ls
