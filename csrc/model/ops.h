// Small fp32 vector operations of the forward pass (norms, RoPE, activations); attention
// kernels over the fp16 KV cache live in model/attention.h.
// Built for both the portable baseline and AVX2+FMA (function multiversioning picks at load).
#pragma once

#include <cstdint>
#include <vector>

#include "common/lazy_array.h"

namespace ls {

// out = x / sqrt(mean(x²) + eps) * w ; the mean is accumulated in double (as ggml does).
// out may alias x.
void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps);
void add_f32(float* y, const float* x, int64_t n);             // y += x
void scale_f32(float* y, float s, int64_t n);                  // y *= s
void silu_mul(float* a, const float* b, int64_t n);            // a = silu(a) ⊙ b
// a = gelu_tanh(a) ⊙ b through ggml's fp16 table (gelu.cpp says why); the portable loop is the
// reference the AVX2 path is tested against.
void gelu_tanh_mul(float* a, const float* b, int64_t n);
void gelu_tanh_mul_portable(float* a, const float* b, int64_t n);

// cos/sin of θ = pos · base^(−2i/n_rot), i < n_rot/2, as [n_pos][n_rot/2] rows. A row is computed
// when a forward first reaches its position (ensure), so only positions used are resident
// (Gemma 3's two bases at 4096 positions would be 8 MB per lane up front).
class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(float base, int n_rot, int n_pos);
  void ensure(int n_pos);  // rows [0, n_pos) are ready; n_pos ≤ the size given at construction
  const float* cos_row(int pos) const { return cos_.data() + int64_t(pos) * half_; }
  const float* sin_row(int pos) const { return sin_.data() + int64_t(pos) * half_; }

 private:
  std::vector<double> inv_freq_;  // [n_rot/2]
  LazyArray<float> cos_, sin_;    // [n_pos][n_rot/2]
  int half_ = 0, rows_ready_ = 0;
};
// Rotates the first n_rot dims of one head in place: adjacent pairs (norm) or halves (neox).
void rope_apply(float* x, const float* cos_t, const float* sin_t, int n_rot, bool neox);

}  // namespace ls
