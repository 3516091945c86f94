// Float-weight matrix × matrix product for many activation rows (the vision encoder's ViT runs
// ~1000 patch rows through every matrix at once).
//
// y[r][o] = Σ_i W[o][i] · x[r][i] for W of type F32, F16 or BF16 (n_out rows of n_in elements,
// row stride ggml_row_bytes(wt, n_in)) and fp32 activations x (n_rows × n_in, row stride n_in).
//
// Numerics: every output element is ONE fp32 accumulator updated in order i = 0 .. n_in-1 by
// acc = fma(W[o][i], x[r][i], acc), starting from +0. That order is fixed by (r, o) alone, so y is
// bit-identical on every ISA path (scalar std::fma, AVX2, AVX-512), for any thread count, any
// split of the rows into batches and any tile position. (quant.h's matmul() for float weights
// sums 8 lanes then reduces them: a different order, within ~1e-6 relative.)
//
// Why a separate kernel: matmul()'s float path is a dot product per (row, output) whose weights
// are re-read for every 4 activation rows; here a block of the weights is widened to fp32 and
// transposed once per call into 16-output (zmm) / 8-output (ymm) lanes, and a register tile of
// rows × outputs is advanced by broadcast-FMAs — no horizontal sums, each weight load feeds
// several rows. The ISA follows quant::active_isa() (so LANESERVE_ISA / set_isa apply).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/thread_pool.h"
#include "gguf/gguf.h"

namespace ls {

// True for the weight types gemm_float() takes (F32, F16, BF16).
bool gemm_float_supported(GgmlType wt);

// y (row stride y_stride floats) = x · Wᵀ, split over the pool in tiles of rows × outputs.
void gemm_float(ThreadPool& pool, GgmlType wt, const void* w, int64_t n_in, int64_t n_out, const float* x,
                int64_t n_rows, float* y, int64_t y_stride);
// The same product in the calling thread (same bits), for callers that parallelise over
// independent products themselves (the vision encoder's attention: one task per head and block).
void gemm_float_serial(GgmlType wt, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t n_rows,
                       float* y, int64_t y_stride);

// Internals shared by gemm_float.cpp and the ISA files gemm_float_{avx2,avx512}.cpp.
namespace quant::gemmf {
// Computes rows [r0, r1) × outputs [o0, o1) of y, o1 - o0 ≤ the kernel's cols_per_task.
using TaskFn = void (*)(GgmlType t, const uint8_t* w, size_t w_stride, int64_t n_in, const float* x, int64_t r0,
                        int64_t r1, int64_t o0, int64_t o1, float* y, int64_t y_stride);
struct Kernel {
  TaskFn run = nullptr;
  int64_t cols_per_task = 0;
  int rows_per_tile = 0;
};
Kernel kernel_avx2();
Kernel kernel_avx512();
// This thread's buffer of at least n floats, 64-byte aligned, kept for the thread's life.
float* thread_buffer(size_t n);
}  // namespace quant::gemmf

}  // namespace ls
