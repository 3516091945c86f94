// Small fp32 vector operations of the forward pass (norms, activations); RoPE lives in
// model/rope.h, attention kernels over the fp16 KV cache in model/attention.h.
// Built for both the portable baseline and AVX2+FMA (function multiversioning picks at load).
#pragma once

#include <cstdint>

namespace ls {

// out = x / sqrt(mean(x²) + eps) * w ; the mean is accumulated in double (as ggml does).
// out may alias x.
void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps);
void add_f32(float* y, const float* x, int64_t n);             // y += x
void scale_f32(float* y, float s, int64_t n);                  // y *= s
// a = silu(a) ⊙ b = a / (1 + expf(−a)) · b with libm's expf; the AVX2 path computes glibc's expf bit for
// bit (silu.cpp), so both give the portable loop's bits.
void silu_mul(float* a, const float* b, int64_t n);
void silu_mul_portable(float* a, const float* b, int64_t n);
// a = gelu_tanh(a) ⊙ b through ggml's fp16 table (gelu.cpp says why); the portable loop is the
// reference the AVX2 path is tested against.
void gelu_tanh_mul(float* a, const float* b, int64_t n);
void gelu_tanh_mul_portable(float* a, const float* b, int64_t n);
void gelu_tanh(float* a, int64_t n);                           // a = gelu_tanh(a), same table
void gelu_tanh_portable(float* a, int64_t n);

}  // namespace ls
