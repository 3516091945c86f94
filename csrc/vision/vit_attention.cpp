// The ViT's full (non-causal) multi-head attention, as clip.cpp computes it with flash attention
// off: scores = K·Q (fp32), softmax_ext(scores, 1/√d_head), then V·P (fp32).
//
// Work is split into tasks of (head, block of kQueryBlock queries), each run start to finish by
// one thread (products on gemm_float_serial, the softmax on model/softmax.h), so one encoder
// block costs two fork-joins instead of three per head and block, and a task's score block stays
// in the core's L2. A task's results depend only on its head and rows: bit-identical for any
// thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/softmax.h"
#include "quant/gemm_float.h"
#include "vision/vision_encoder.h"

namespace ls {
namespace vision {
namespace {

// Queries per task: a multiple of the register tiles' rows (6 zmm, 4 ymm) and of the softmax's
// row groups (4); the score block is kQueryBlock × n_patches floats (384 KB at 1024 patches).
constexpr int64_t kQueryBlock = 96;

// This thread's task buffers, kept for the thread's life (the pool's threads are persistent).
float* task_buffer(size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace

void attention(ThreadPool& pool, Workspace& ws, const float* q, const float* k, const float* v, int64_t stride,
               int64_t n, int n_head, int d_head, float* out) {
  const int64_t width = int64_t(n_head) * d_head, head_floats = n * d_head;
  // Per head: kh [n][d_head] (the scores' "weights") and vt [d_head][n] (V transposed: P·V's).
  float* kh = Workspace::at_least(ws.kh, n_head * head_floats);
  float* vt = Workspace::at_least(ws.vt, n_head * head_floats);
  pool.parallel_for(n_head, 1, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      float* kd = kh + h * head_floats;
      float* vd = vt + h * head_floats;
      for (int64_t t = 0; t < n; ++t) {
        std::memcpy(kd + t * d_head, k + t * stride + h * d_head, sizeof(float) * size_t(d_head));
        for (int j = 0; j < d_head; ++j) vd[j * n + t] = v[t * stride + h * d_head + j];
      }
    }
  });
  const float scale = 1.0f / std::sqrt(float(d_head));
  const int64_t n_blocks = (n + kQueryBlock - 1) / kQueryBlock;
  pool.parallel_for(n_head * n_blocks, 1, [&](int64_t t0, int64_t t1) {
    float* qb = task_buffer(size_t(kQueryBlock * (d_head + n)));  // [bq][d_head] queries, then [bq][n] scores
    float* s = qb + kQueryBlock * d_head;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t h = t / n_blocks, q0 = (t % n_blocks) * kQueryBlock, bq = std::min(kQueryBlock, n - q0);
      for (int64_t r = 0; r < bq; ++r)
        std::memcpy(qb + r * d_head, q + (q0 + r) * stride + h * d_head, sizeof(float) * size_t(d_head));
      gemm_float_serial(GgmlType::F32, kh + h * head_floats, d_head, n, qb, bq, s, n);
      softmax_rows(s, bq, n, int(n), scale);
      gemm_float_serial(GgmlType::F32, vt + h * head_floats, n, d_head, s, bq, out + q0 * width + h * d_head,
                        width);
    }
  });
}

}  // namespace vision
}  // namespace ls
