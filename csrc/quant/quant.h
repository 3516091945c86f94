// Quantized kernels: dequantization and matrix products against int8-quantized activations.
// CONTRACT used by the model code (csrc/model/); implementation lives in csrc/quant/*.cpp.
//
// Weight layout: a 2-D GGUF tensor W with ne = [n_in, n_out]: n_out rows, each row n_in
// elements in ggml blocks (row stride = ggml_row_bytes(type, n_in)).
// Products: y[r][o] = sum_i W[o][i] * x[r][i] for r < n_rows, o < n_out.
// Activations are quantized once per call into the format the weight type pairs with
// (Q8_0 for Q8_0/Q4_0/Q5_0, Q8_1 for Q4_1/Q5_1, Q8_K for K-quants; F32/F16/BF16 use fp32).
//
// Numerics: activation quantization follows llama.cpp's x86 path (round half to even) and is
// bit-identical on every ISA path; integer block dots are exact; paths differ only in the
// order of float accumulation (~1e-6 relative). For a fixed path, y is bit-identical for any
// thread count and any n_rows (row r of a batch == the same row alone).
// Threading: matmul may be called from one thread at a time per (pool, scratch) pair; the
// scratch holds the quantized activations only for the duration of the call.
// Implementation map: act.cpp (activation quantizers, scratch layout), dequant.cpp,
// kernels_{scalar,avx2,avx_vnni,avx512}.cpp (+ kernels_ymm.h shared 256-bit bodies,
// rows_driver.h loop/prefetch/tiling), dispatch.cpp (self-test, LANESERVE_ISA), matmul.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/thread_pool.h"
#include "gguf/gguf.h"

namespace ls {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512Vnni = 2, AvxVnni = 3 };

// The instruction-set path in use. Chosen once: the best path whose probe executed
// (common/cpu_features.h) AND whose kernels match the scalar reference on a self-test;
// LANESERVE_ISA=scalar|avx2|avx_vnni|avx512_vnni forces a (usable) path.
Isa active_isa();
const char* isa_name(Isa isa);
// For tests/benchmarks: force a path; returns false if that path is not usable here.
bool set_isa(Isa isa);
// True when the path's probe executed and its kernels passed the start-up self-test.
bool isa_usable(Isa isa);

// Dequantize n elements (a multiple of the block size) of type t at src into dst.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// Scratch for quantized activations; grows on first use, reused afterwards (allocate once,
// outside the token loop, sized by reserve()).
struct MatmulScratch {
  uint8_t* data = nullptr;
  size_t capacity_bytes = 0;
  void reserve(size_t bytes);
  ~MatmulScratch();
};
// Bytes of scratch a matmul with these shapes needs.
size_t matmul_scratch_bytes(GgmlType wt, int64_t n_in, int64_t n_rows);

// y (row stride y_stride floats) = x (n_rows × n_in, row stride n_in) · Wᵀ.
// Splits output rows over the pool; results are independent of the thread count.
void matmul(ThreadPool& pool, MatmulScratch& scratch, GgmlType wt, const void* w, int64_t n_in,
            int64_t n_out, const float* x, int64_t n_rows, float* y, int64_t y_stride);

// One weight of a matmul_multi: n_out rows (same type and n_in as its siblings) → y.
struct MatmulOut {
  const void* w;
  int64_t n_out;
  float* y;
  int64_t y_stride;
};
// Several weights applied to the same x (e.g. attention q/k/v, ffn gate/up): the activation is
// quantized once and all output rows are split over the pool in one dispatch. Results are
// bit-identical to separate matmul() calls.
void matmul_multi(ThreadPool& pool, MatmulScratch& scratch, GgmlType wt, int64_t n_in, const float* x,
                  int64_t n_rows, const MatmulOut* outs, int n_outs);

}  // namespace ls
