// The projectors after the SigLIP encoder (llama.cpp's clip_graph_siglip, gemma3 and idefics3 branches).
#include <cstring>
#include <vector>

#include "model/ops.h"
#include "vision/vision_encoder.h"

namespace ls {
namespace vision {
namespace {

// gemma3: k×k average pooling of the n_side × n_side patch grid (ggml_pool_2d: fp32 sum in row-major
// window order, then one division), RMSNorm × soft_emb_norm, then the input projection.
void project_gemma3(const Mmproj& m, ThreadPool& pool, MatmulScratch& scratch, const float* hidden, float* out) {
  const VisionHparams& hp = m.hparams();
  const int n_side = hp.image_size / hp.patch_size, k = hp.merge, o_side = n_side / k;
  const int64_t d = hp.n_embd, n_out = int64_t(o_side) * o_side;
  std::vector<float> pooled(size_t(n_out * d));
  pool.parallel_for(n_out, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int oy = int(t / o_side), ox = int(t % o_side);
      float* dst = &pooled[size_t(t * d)];
      for (int64_t e = 0; e < d; ++e) {
        float sum = 0.0f;
        for (int ky = 0; ky < k; ++ky)
          for (int kx = 0; kx < k; ++kx) sum += hidden[((oy * k + ky) * n_side + ox * k + kx) * d + e];
        dst[e] = sum / float(k * k);
      }
      rmsnorm(dst, m.soft_emb_norm_w.data(), dst, d, hp.eps);
    }
  });
  linear(pool, scratch, m.input_proj, pooled.data(), n_out, out, {});
}

// idefics3: pixel shuffle (each s×s block of patches becomes one token whose features are the
// block's patches in (dy, dx) order: feature (dy·s + dx)·n_embd + e), then mm.model.fc.
void project_idefics3(const Mmproj& m, ThreadPool& pool, MatmulScratch& scratch, const float* hidden, float* out) {
  const VisionHparams& hp = m.hparams();
  const int n_side = hp.image_size / hp.patch_size, s = hp.merge, o_side = n_side / s;
  const int64_t d = hp.n_embd, n_out = int64_t(o_side) * o_side;
  std::vector<float> shuffled(size_t(n_out * d * s * s));
  for (int oy = 0; oy < o_side; ++oy)
    for (int ox = 0; ox < o_side; ++ox)
      for (int dy = 0; dy < s; ++dy)
        for (int dx = 0; dx < s; ++dx)
          std::memcpy(&shuffled[size_t(((oy * o_side + ox) * s * s + dy * s + dx) * d)],
                      hidden + ((oy * s + dy) * n_side + ox * s + dx) * d, sizeof(float) * size_t(d));
  linear(pool, scratch, m.fc, shuffled.data(), n_out, out, {});
}

}  // namespace

void project(const Mmproj& m, ThreadPool& pool, MatmulScratch& scratch, float* hidden, float* out) {
  if (m.hparams().projector == ProjectorType::Gemma3) project_gemma3(m, pool, scratch, hidden, out);
  else project_idefics3(m, pool, scratch, hidden, out);
}

}  // namespace vision

VisionEncoder::VisionEncoder(std::shared_ptr<const Mmproj> mmproj, int n_threads)
    : mmproj_(std::move(mmproj)), pool_(n_threads) {}

void VisionEncoder::encode(const float* pixels, float* out) {
  std::lock_guard<std::mutex> lock(mu_);
  vision::vit_forward(*mmproj_, pool_, scratch_, ws_, pixels);
  vision::project(*mmproj_, pool_, scratch_, ws_.hidden.data(), out);
}

}  // namespace ls
