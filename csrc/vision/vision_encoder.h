// The vision encoder of an mmproj file: normalised pixels of one image_size² input → image
// embeddings in the text model's space, computed as llama.cpp's mtmd computes them (clip.cpp's
// SigLIP graph with flash attention off): the same op order, float-weight products on gemm_float
// (quant/gemm_float.h; quantized weights on the text path's matmul) with activations rounded to fp16 / bf16 before products with fp16 / bf16 weights (ggml converts
// them to the weight's dot type), layer norms with double accumulation, GELU from ggml's fp16
// table, softmax in fp32 (glibc's exp, vectorised; the sum in fp32 in index order: model/softmax.h). Attention is fp32 throughout (llama.cpp's default
// flash-attention path keeps K and V in fp16; the golden tests measure that spread).
//
// Threading: one pool per encoder; every reduction is split by rows, so results are bit-identical
// for any thread count. encode() serialises callers.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "common/thread_pool.h"
#include "quant/quant.h"
#include "vision/mmproj.h"

namespace ls {

namespace vision {
// The buffers of one encode, kept by the encoder between images (grown, never shrunk): no page
// faults or zero-filling of ~30 MB of activations per image.
struct Workspace {
  std::vector<float> patches, hidden, cur, qkv, attn, ff, kh, vt;
  // v's storage for at least n floats (contents unspecified).
  static float* at_least(std::vector<float>& v, int64_t n) {
    if (v.size() < size_t(n)) v.resize(size_t(n));
    return v.data();
  }
};
}  // namespace vision

class VisionEncoder {
 public:
  VisionEncoder(std::shared_ptr<const Mmproj> mmproj, int n_threads);

  const Mmproj& mmproj() const { return *mmproj_; }
  int n_tokens() const { return mmproj_->tokens_per_image(); }
  int n_embd_out() const { return mmproj_->hparams().n_embd_out; }
  int n_threads() const { return pool_.num_threads(); }

  // pixels: 3 planes of image_size × image_size floats (R, G, B; rows top to bottom), already
  // normalised with the file's mean / std. out: n_tokens() rows of n_embd_out() floats.
  void encode(const float* pixels, float* out);

 private:
  std::shared_ptr<const Mmproj> mmproj_;
  ThreadPool pool_;
  MatmulScratch scratch_;
  vision::Workspace ws_;
  std::mutex mu_;
};

// Internals shared by vit.cpp and projector.cpp.
namespace vision {
// Rounds x to the precision ggml converts activations to before a product with weights of type t
// (fp16 for F16, bf16 for BF16; quantized types are handled inside matmul, F32 needs nothing).
void round_for_weights(GgmlType t, float* x, int64_t n);
// y (n_rows × w.n_out) = x (n_rows × w.n_in) · wᵀ; x is rounded in place first (round_for_weights).
void linear(ThreadPool& pool, MatmulScratch& scratch, const VisionMatrix& w, float* x, int64_t n_rows, float* y,
            const std::vector<float>& bias);
// Full multi-head attention over n tokens (vit_attention.cpp): q, k, v rows (stride `stride`) of
// n_head·d_head floats each → out (n rows of n_head·d_head). ws.kh and ws.vt hold per-head copies.
void attention(ThreadPool& pool, Workspace& ws, const float* q, const float* k, const float* v, int64_t stride,
               int64_t n, int n_head, int d_head, float* out);
// ViT over one input: pixels (3 × S × S) → ws.hidden (n_patches × n_embd), after post_ln.
void vit_forward(const Mmproj& m, ThreadPool& pool, MatmulScratch& scratch, Workspace& ws, const float* pixels);
// Projector: hidden (n_patches × n_embd, clobbered) → out (tokens_per_image × n_embd_out).
void project(const Mmproj& m, ThreadPool& pool, MatmulScratch& scratch, float* hidden, float* out);
}  // namespace vision

}  // namespace ls
