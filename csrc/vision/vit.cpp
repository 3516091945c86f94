// SigLIP encoder of an mmproj file (see vision_encoder.h for the numerics).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/cpu_features.h"
#include "common/fp16.h"
#include "model/ops.h"
#include "quant/gemm_float.h"
#include "vision/vision_encoder.h"

namespace ls {
namespace vision {
namespace {

inline float bf16_round(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return f;  // NaN stays NaN
  x = (x + 0x7fffu + ((x >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&f, &x, 4);
  return f;
}

// fp16_round of 8 lanes at a time: vcvtps2ph rounds to nearest even as f32_to_fp16 does (overflow
// to ±inf, subnormals exact), so the result is bit-identical to the scalar loop (NaN stays NaN).
__attribute__((target("avx2,f16c")))
void fp16_round_avx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) x[i] = fp16_round(x[i]);
}

// ggml_norm then the optional weight and bias: mean and variance accumulated in double.
void layer_norm_rows(ThreadPool& pool, const float* x, float* y, int64_t n_rows, int64_t n, float eps,
                     const std::vector<float>& w, const std::vector<float>& b) {
  pool.parallel_for(n_rows, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += xr[i];
      const float mean = float(sum) / float(n);
      double sum2 = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const float v = xr[i] - mean;
        yr[i] = v;
        sum2 += double(v * v);
      }
      const float scale = 1.0f / std::sqrt(float(sum2 / double(n)) + eps);
      for (int64_t i = 0; i < n; ++i) yr[i] *= scale;
      if (!w.empty()) for (int64_t i = 0; i < n; ++i) yr[i] *= w[size_t(i)];
      if (!b.empty()) for (int64_t i = 0; i < n; ++i) yr[i] += b[size_t(i)];
    }
  });
}

void add_rows(ThreadPool& pool, float* y, const float* x, int64_t n_rows, int64_t n) {
  pool.parallel_for(n_rows, 16, [&](int64_t r0, int64_t r1) { add_f32(y + r0 * n, x + r0 * n, (r1 - r0) * n); });
}

}  // namespace

void round_for_weights(GgmlType t, float* x, int64_t n) {
  static const bool use_f16c = cpu_features().avx2;  // AVX2 + FMA + F16C executed here
  if (t == GgmlType::F16 && use_f16c) {
    fp16_round_avx2(x, n);
  } else if (t == GgmlType::F16) {
    for (int64_t i = 0; i < n; ++i) x[i] = fp16_round(x[i]);
  } else if (t == GgmlType::BF16) {
    for (int64_t i = 0; i < n; ++i) x[i] = bf16_round(x[i]);
  }
}

namespace {
// y (row stride y_stride) = x · wᵀ: gemm_float for F32 / F16 / BF16 weights, matmul otherwise.
void product(ThreadPool& pool, MatmulScratch& scratch, GgmlType t, const void* w, int64_t n_in, int64_t n_out,
             const float* x, int64_t n_rows, float* y, int64_t y_stride) {
  if (gemm_float_supported(t)) gemm_float(pool, t, w, n_in, n_out, x, n_rows, y, y_stride);
  else matmul(pool, scratch, t, w, n_in, n_out, x, n_rows, y, y_stride);
}
}  // namespace

void linear(ThreadPool& pool, MatmulScratch& scratch, const VisionMatrix& w, float* x, int64_t n_rows, float* y,
            const std::vector<float>& bias) {
  round_for_weights(w.type, x, n_rows * w.n_in);
  product(pool, scratch, w.type, w.data, w.n_in, w.n_out, x, n_rows, y, w.n_out);
  if (!bias.empty()) {
    pool.parallel_for(n_rows, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) add_f32(y + r * w.n_out, bias.data(), w.n_out);
    });
  }
}

void vit_forward(const Mmproj& m, ThreadPool& pool, MatmulScratch& scratch, Workspace& ws, const float* pixels) {
  const VisionHparams& hp = m.hparams();
  const int p = hp.patch_size, side = hp.image_size, n_side = side / p;
  const int64_t n = int64_t(n_side) * n_side, d = hp.n_embd, width = int64_t(hp.n_head) * hp.d_head;

  // Patch embedding = a stride-p convolution: each patch flattened in the kernel's (c, y, x) order.
  float* hidden = Workspace::at_least(ws.hidden, n * d);  // [n][n_embd] the residual stream
  float* patches = Workspace::at_least(ws.patches, n * 3 * p * p);  // [n][3·p·p], patch t = (t / n_side, t % n_side)
  for (int py = 0; py < n_side; ++py)
    for (int px = 0; px < n_side; ++px) {
      float* dst = patches + (py * n_side + px) * 3 * p * p;
      for (int c = 0; c < 3; ++c)
        for (int ky = 0; ky < p; ++ky)
          std::memcpy(dst + (c * p + ky) * p, pixels + (size_t(c) * side + py * p + ky) * side + px * p,
                      sizeof(float) * size_t(p));
    }
  linear(pool, scratch, m.patch_w, patches, n, hidden, m.patch_b);
  add_rows(pool, hidden, m.pos_embd.data(), n, d);

  float* cur = Workspace::at_least(ws.cur, n * std::max(d, width));  // [n][n_embd] normed input / block output
  float* qkv = Workspace::at_least(ws.qkv, n * 3 * width);           // [n][q | k | v], each n_head·d_head
  float* attn = Workspace::at_least(ws.attn, n * width);             // [n][n_head·d_head] attention output
  float* ff = Workspace::at_least(ws.ff, n * hp.n_ff);               // [n][n_ff] FFN hidden
  for (const VisionLayer& L : m.layers) {
    layer_norm_rows(pool, hidden, cur, n, d, hp.eps, L.ln1_w, L.ln1_b);
    // q, k and v side by side in one buffer (row stride 3·width).
    float* q = qkv;
    if (L.q.type == L.k.type && L.q.type == L.v.type && !gemm_float_supported(L.q.type)) {
      round_for_weights(L.q.type, cur, n * d);
      const MatmulOut outs[3] = {{L.q.data, width, q, 3 * width},
                                 {L.k.data, width, q + width, 3 * width},
                                 {L.v.data, width, q + 2 * width, 3 * width}};
      matmul_multi(pool, scratch, L.q.type, d, cur, n, outs, 3);
    } else if (L.q.type == L.k.type && L.q.type == L.v.type) {  // float weights: one rounding, three products
      round_for_weights(L.q.type, cur, n * d);
      const VisionMatrix* mats[3] = {&L.q, &L.k, &L.v};
      for (int j = 0; j < 3; ++j) gemm_float(pool, L.q.type, mats[j]->data, d, width, cur, n, q + j * width, 3 * width);
    } else {  // mixed types: each product rounds its own copy of the input
      std::vector<float> x(size_t(n * d));
      const VisionMatrix* mats[3] = {&L.q, &L.k, &L.v};
      for (int j = 0; j < 3; ++j) {
        std::memcpy(x.data(), cur, sizeof(float) * x.size());
        round_for_weights(mats[j]->type, x.data(), n * d);
        product(pool, scratch, mats[j]->type, mats[j]->data, d, width, x.data(), n, q + j * width, 3 * width);
      }
    }
    const std::vector<float>* biases[3] = {&L.q_b, &L.k_b, &L.v_b};
    for (int j = 0; j < 3; ++j) {
      const std::vector<float>& b = *biases[j];
      if (b.empty()) continue;
      pool.parallel_for(n, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) add_f32(q + r * 3 * width + j * width, b.data(), width);
      });
    }
    attention(pool, ws, q, q + width, q + 2 * width, 3 * width, n, hp.n_head, hp.d_head, attn);
    linear(pool, scratch, L.o, attn, n, cur, L.o_b);
    add_rows(pool, hidden, cur, n, d);

    layer_norm_rows(pool, hidden, cur, n, d, hp.eps, L.ln2_w, L.ln2_b);
    linear(pool, scratch, L.up, cur, n, ff, L.up_b);
    pool.parallel_for(n, 16, [&](int64_t r0, int64_t r1) { gelu_tanh(ff + r0 * hp.n_ff, (r1 - r0) * hp.n_ff); });
    linear(pool, scratch, L.down, ff, n, cur, L.down_b);
    add_rows(pool, hidden, cur, n, d);
  }
  if (!m.post_ln_w.empty() || !m.post_ln_b.empty())
    layer_norm_rows(pool, hidden, hidden, n, d, hp.eps, m.post_ln_w, m.post_ln_b);
}

}  // namespace vision
}  // namespace ls
