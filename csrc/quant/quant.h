// Quantized kernels: dequantization and matrix products against int8-quantized activations.
// CONTRACT used by the model code (csrc/model/); implementation lives in csrc/quant/*.cpp.
//
// Weight layout: a 2-D GGUF tensor W with ne = [n_in, n_out]: n_out rows, each row n_in
// elements in ggml blocks (row stride = ggml_row_bytes(type, n_in)).
// Products: y[r][o] = sum_i W[o][i] * x[r][i] for r < n_rows, o < n_out.
// Activations are quantized once per call into the format the weight type pairs with
// (Q8_0 for Q8_0/Q4_0/Q5_0/IQ4_NL/MXFP4, Q8_1 for Q4_1/Q5_1, Q8_K for K-quants and IQ4_XS; F32/F16/BF16
// use fp32), as llama.cpp pairs them.
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
// The CPU's features allow the path; it is usable only if its start-up self-test also passed, so a
// supported path that is not usable is a kernel bug (the machine silently runs a slower path).
bool isa_supported(Isa isa);
// AMX-INT8: on the avx512_vnni path, interleaved products (the types kernels_amx.cpp lists) with ≥ 16 activation rows run on
// tiles when the CPU lets this process use them and they passed the self-test (amx_available). Bit-identical
// to the kernels they replace. With LANESERVE_AMX=0 the process never asks for nor runs them (cpu_features.cpp);
// set_amx(false) turns them off for a while; set_amx returns whether they are on afterwards.
bool amx_available();
bool amx_active();
bool set_amx(bool on);

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

// ---- Row-interleaved weights (the matrix × matrix layout) ----
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, and the 256-element types Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS,
// matrices with n_out a multiple of 16 can be repacked once at load into groups of 16 output rows: for each
// group and each block (K types: super-block), one record holds that block of all 16 rows (scales
// first, then the codes 4 bytes per row side by side), so one broadcast of 4 activation bytes feeds
// 16 rows in a single vpdpbusd. About the original's bytes (interleaved_bytes); the repacked copy
// replaces the original in use.
// Numerics (every ISA path, bit-identical to each other and for any batch or thread split):
// per output (row o, activation row r), over blocks b in order,
//   acc = fma(float(int_dot_b), f32(d_w,b) · d_a,b, acc) (MXFP4: d_w = its E8M0 scale halved);  Q4_1/Q5_1 then acc = fma(m_w,b, s_a,b, acc).
// K types per super-block: the exact int32 Σ scale·dot (Q6_K / Q3_K: with its −32 / −4 folded in via
// the activation block sums), acc = fma(float(sumi), d_w·d_a, acc); Q4_K / Q5_K / Q2_K then
// accm = fma(float(Σ min·bsum), dmin_w·d_a, accm), and the output is acc − accm. IQ4_NL, MXFP4, IQ4_XS, Q2_K
// and Q3_K keep their row kernels' integers and float order, so the two layouts give the same bits.
enum class WeightLayout : uint8_t { Rows = 0, Interleaved16 = 1 };
constexpr int kInterleaveRows = 16;
bool interleave_supported(GgmlType t, int64_t n_in, int64_t n_out);
// Supported, and the active path has SIMD kernels for it (the scalar path keeps the original
// layout, whose scalar kernels are faster than the interleaved reference).
bool interleave_preferred(GgmlType t, int64_t n_in, int64_t n_out);
// Bytes of the interleaved form (the original size; Q4_K +2.8%, Q3_K +3.6% for scales stored as bytes).
size_t interleaved_bytes(GgmlType t, int64_t n_in, int64_t n_out);
// Writes the interleaved form of the n_out × n_in matrix src (ggml_row_bytes(t, n_in)·n_out
// bytes) to dst (interleaved_bytes()). Requires interleave_supported().
void interleave_weights(GgmlType t, const void* src, int64_t n_in, int64_t n_out, void* dst);
// Row `row` of a weight matrix in either layout, dequantized to n_in floats (embedding lookup).
void dequantize_weight_row(GgmlType t, WeightLayout layout, const void* w, int64_t n_in, int64_t row, float* dst);

// Small independent work that shares a matmul's pool dispatch (LoRA terms, model/lora.h): tasks
// 0 .. n-1, each run(ctx, k) once on some thread, task k just before the k-th grain of output rows on
// the same thread (matmul.cpp dispatch_rows). They must not read the matmul's output.
struct SideTasks {
  int64_t n = 0;
  void (*run)(void* ctx, int64_t k) = nullptr;
  void* ctx = nullptr;
};

// y (row stride y_stride floats) = x (n_rows × n_in, row stride n_in) · Wᵀ.
// Splits output rows over the pool; results are independent of the thread count.
// side (optional): tasks run within the same dispatch.
void matmul(ThreadPool& pool, MatmulScratch& scratch, GgmlType wt, const void* w, int64_t n_in,
            int64_t n_out, const float* x, int64_t n_rows, float* y, int64_t y_stride,
            WeightLayout layout = WeightLayout::Rows, const SideTasks* side = nullptr);

// One weight of a matmul_multi: n_out rows (same type and n_in as its siblings) → y. By default it
// reads every row of x; n_rows ≥ 0 picks rows [row0, row0 + n_rows) of x instead (y then holds
// only those), so the experts of a MoE layer, each over its own gathered rows, share one call.
struct MatmulOut {
  const void* w;
  int64_t n_out;
  float* y;
  int64_t y_stride;
  int64_t row0 = 0;
  int64_t n_rows = -1;
};
// Several weights applied to the same x (e.g. attention q/k/v, ffn gate/up): the activation is
// quantized once and all output rows are split over the pool in one dispatch. Results are
// bit-identical to separate matmul() calls.
// All outs share wt, n_in and layout.
void matmul_multi(ThreadPool& pool, MatmulScratch& scratch, GgmlType wt, int64_t n_in, const float* x,
                  int64_t n_rows, const MatmulOut* outs, int n_outs, WeightLayout layout = WeightLayout::Rows,
                  const SideTasks* side = nullptr);

}  // namespace ls
