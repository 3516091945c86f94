// A vision projector file (llama.cpp's "mmproj" GGUF): a SigLIP-style ViT encoder and the projector
// that maps its patch features into the text model's embedding space.
//
// Format (as llama.cpp's tools/mtmd writes and reads it): keys clip.projector_type and
// clip.vision.{image_size, patch_size, embedding_length, feed_forward_length, block_count,
// attention.head_count, attention.layer_norm_epsilon, image_mean, image_std,
// projector.scale_factor, preproc_image_size}; tensors v.patch_embd.{weight,bias},
// v.position_embd.weight, v.blk.N.{attn_q,attn_k,attn_v,attn_out,ln1,ln2,ffn_up,ffn_down}.{weight,bias},
// v.post_ln.{weight,bias} and the projector's mm.* tensors.
// Supported projectors: gemma3 (2-D average pool → RMSNorm mm.soft_emb_norm → mm.input_projection)
// and idefics3 (pixel shuffle by scale_factor → mm.model.fc). Anything else is a clear error.
//
// Matrices stay in the read-only mapping (shared by every process that maps the file); only
// small vectors (norms, biases, position embeddings) are widened to fp32 copies, and gemma3's
// input projection, which the file stores transposed, is re-laid out once at load.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace ls {

enum class ProjectorType { Gemma3, Idefics3 };
const char* projector_type_name(ProjectorType t);

// A matrix for matmul(): n_out rows of n_in elements of `type` at `data`.
struct VisionMatrix {
  GgmlType type = GgmlType::F32;
  const void* data = nullptr;
  int64_t n_in = 0, n_out = 0;
};

struct VisionLayer {
  VisionMatrix q, k, v, o, up, down;
  std::vector<float> q_b, k_b, v_b, o_b, up_b, down_b;  // empty when the file has no bias
  std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b;
};

struct VisionHparams {
  ProjectorType projector = ProjectorType::Gemma3;
  int image_size = 0;        // pixels per side of one encoder input (a tile for idefics3)
  int patch_size = 0;        // pixels per side of one patch
  int n_embd = 0;            // ViT hidden size
  int n_ff = 0;
  int n_layer = 0;
  int n_head = 0;
  int d_head = 0;
  float eps = 1e-6f;
  float image_mean[3] = {0, 0, 0};
  float image_std[3] = {1, 1, 1};
  int merge = 1;             // gemma3: pooling kernel per side; idefics3: pixel-shuffle factor
  int longest_edge = 0;      // idefics3: preproc_image_size (the resized image's longest side)
  int n_embd_out = 0;        // projector output size (must equal the text model's n_embd)
};

class Mmproj {
 public:
  // Maps and validates the file; throws GgufError (prefixed with the path) for an unsupported
  // projector type or missing / mis-shaped tensors.
  explicit Mmproj(const std::string& path);

  const VisionHparams& hparams() const { return hp_; }
  const std::string& path() const { return file_->path(); }
  // Throws GgufError unless the projector's output size equals the text model's n_embd.
  void require_text_embd(int64_t text_n_embd) const;
  // Image embeddings one encoder input of image_size² pixels yields.
  int tokens_per_image() const;

  VisionMatrix patch_w;                  // [n_embd rows × 3·p·p], element order (c, y, x)
  std::vector<float> patch_b;            // n_embd, or empty
  std::vector<float> pos_embd;           // n_pos × n_embd
  int64_t n_pos = 0;
  std::vector<VisionLayer> layers;
  std::vector<float> post_ln_w, post_ln_b;  // empty when absent
  // gemma3
  std::vector<float> soft_emb_norm_w;
  std::vector<uint8_t> input_proj_rows;  // input projection as [n_embd_out rows × n_embd]
  VisionMatrix input_proj;
  // idefics3
  VisionMatrix fc;

 private:
  VisionMatrix matrix(const std::string& name, int64_t n_in, int64_t n_out) const;
  std::vector<float> vec(const std::string& name, int64_t n, bool required) const;
  void load_layers();
  void load_projector();

  std::unique_ptr<GgufFile> file_;
  VisionHparams hp_;
};

}  // namespace ls
