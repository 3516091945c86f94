#include "vision/mmproj.h"

#include <cstring>

#include "common/fp16.h"
#include "quant/quant.h"

namespace ls {

const char* projector_type_name(ProjectorType t) {
  return t == ProjectorType::Gemma3 ? "gemma3" : "idefics3";
}

namespace {

std::string shape_str(const GgufTensor& t) {
  std::string s = "[";
  for (uint32_t d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

}  // namespace

VisionMatrix Mmproj::matrix(const std::string& name, int64_t n_in, int64_t n_out) const {
  const GgufTensor& t = file_->require_tensor(name);
  if (t.n_dims != 2 || t.ne[0] != n_in || t.ne[1] != n_out)
    file_->fail("tensor " + name + " has shape " + shape_str(t) + ", expected [" + std::to_string(n_in) + ", " +
                std::to_string(n_out) + "]");
  if (!ggml_type_supported(t.type) || n_in % ggml_type_info(t.type).block_elems != 0)
    file_->fail("tensor " + name + " has unsupported type " + ggml_type_info(t.type).name);
  return VisionMatrix{t.type, t.data, n_in, n_out};
}

std::vector<float> Mmproj::vec(const std::string& name, int64_t n, bool required) const {
  const GgufTensor* t = file_->tensor(name);
  if (!t) {
    if (required) file_->fail("missing tensor " + name);
    return {};
  }
  if (t->n_elements() != n)
    file_->fail("tensor " + name + " has " + std::to_string(t->n_elements()) + " elements, expected " + std::to_string(n));
  if (!ggml_type_supported(t->type) || n % ggml_type_info(t->type).block_elems != 0)
    file_->fail("tensor " + name + " has unsupported type " + ggml_type_info(t->type).name);
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t->type, t->data, out.data(), n);
  return out;
}

Mmproj::Mmproj(const std::string& path) : file_(std::make_unique<GgufFile>(path)) {
  const GgufFile& f = *file_;
  if (!f.get_bool("clip.has_vision_encoder", true)) f.fail("this projector has no vision encoder");
  std::string type = f.get_string("clip.vision.projector_type", "");
  if (type.empty()) type = f.get_string("clip.projector_type", "");
  if (type == "gemma3") {
    hp_.projector = ProjectorType::Gemma3;
  } else if (type == "idefics3") {
    hp_.projector = ProjectorType::Idefics3;
  } else {
    f.fail("unsupported projector type '" + type + "' (supported: gemma3, idefics3)");
  }
  auto need_int = [&](const std::string& key) {
    const int64_t v = f.get_int(key, -1);
    if (v <= 0) f.fail("missing or invalid " + key);
    return int(v);
  };
  hp_.image_size = need_int("clip.vision.image_size");
  hp_.patch_size = need_int("clip.vision.patch_size");
  hp_.n_embd = need_int("clip.vision.embedding_length");
  hp_.n_ff = need_int("clip.vision.feed_forward_length");
  hp_.n_layer = need_int("clip.vision.block_count");
  hp_.n_head = need_int("clip.vision.attention.head_count");
  hp_.eps = float(f.get_float("clip.vision.attention.layer_norm_epsilon", -1.0));
  if (!(hp_.eps > 0)) f.fail("missing clip.vision.attention.layer_norm_epsilon");
  const int64_t head_dim = f.get_int("clip.vision.attention.head_dim", 0);
  hp_.d_head = head_dim > 0 ? int(head_dim) : hp_.n_embd / hp_.n_head;
  if (f.get_int("clip.vision.attention.head_count_kv", hp_.n_head) != hp_.n_head)
    f.fail("grouped-query attention in the vision encoder is not supported");
  if (hp_.image_size % hp_.patch_size != 0) f.fail("image_size is not a multiple of patch_size");
  // llama.cpp falls back to gelu_quick without this flag; both supported projectors set it.
  if (!f.get_bool("clip.use_gelu", false) || f.get_bool("clip.use_silu", false))
    f.fail("only the GELU feed-forward (clip.use_gelu) is supported");
  const std::vector<float> mean = f.get_float_array("clip.vision.image_mean");
  const std::vector<float> std_ = f.get_float_array("clip.vision.image_std");
  if (mean.size() < 3 || std_.size() < 3) f.fail("image_mean / image_std need 3 values");
  for (int c = 0; c < 3; ++c) {
    hp_.image_mean[c] = mean[c];
    hp_.image_std[c] = std_[c];
  }
  hp_.merge = int(f.get_int("clip.vision.projector.scale_factor", hp_.projector == ProjectorType::Gemma3 ? 4 : 1));
  if (hp_.projector == ProjectorType::Idefics3) {
    if (hp_.merge < 2) f.fail("idefics3 needs clip.vision.projector.scale_factor >= 2");
    hp_.longest_edge = int(f.get_int("clip.vision.preproc_image_size", 0));
    if (hp_.longest_edge <= 0) f.fail("idefics3 needs clip.vision.preproc_image_size");
  }
  const int n_side = hp_.image_size / hp_.patch_size;
  if (hp_.merge < 1 || n_side % hp_.merge != 0)
    f.fail("patches per side (" + std::to_string(n_side) + ") is not a multiple of the projector's merge factor " +
           std::to_string(hp_.merge));

  const int p = hp_.patch_size;
  const GgufTensor& pw = f.require_tensor("v.patch_embd.weight");
  if (pw.ne[0] != p || pw.ne[1] != p || pw.ne[2] != 3 || pw.ne[3] != hp_.n_embd)
    f.fail("tensor v.patch_embd.weight has shape " + shape_str(pw) + ", expected [" + std::to_string(p) + ", " +
           std::to_string(p) + ", 3, " + std::to_string(hp_.n_embd) + "]");
  if (!ggml_type_supported(pw.type) || (3 * p * p) % ggml_type_info(pw.type).block_elems != 0)
    f.fail(std::string("tensor v.patch_embd.weight has unsupported type ") + ggml_type_info(pw.type).name);
  patch_w = VisionMatrix{pw.type, pw.data, int64_t(3) * p * p, hp_.n_embd};
  patch_b = vec("v.patch_embd.bias", hp_.n_embd, false);
  const GgufTensor& pe = f.require_tensor("v.position_embd.weight");
  n_pos = pe.ne[1];
  if (pe.ne[0] != hp_.n_embd || n_pos != int64_t(n_side) * n_side)
    f.fail("tensor v.position_embd.weight has shape " + shape_str(pe) + ", expected [" + std::to_string(hp_.n_embd) +
           ", " + std::to_string(n_side * n_side) + "]");
  pos_embd = vec("v.position_embd.weight", n_pos * hp_.n_embd, true);
  if (f.tensor("v.pre_ln.weight")) f.fail("a pre-encoder layer norm (v.pre_ln) is not supported");
  post_ln_w = vec("v.post_ln.weight", hp_.n_embd, false);
  post_ln_b = vec("v.post_ln.bias", hp_.n_embd, false);
  load_layers();
  load_projector();
}

void Mmproj::load_layers() {
  const GgufFile& f = *file_;
  const int64_t d = hp_.n_embd, qkv = int64_t(hp_.n_head) * hp_.d_head;
  layers.resize(size_t(hp_.n_layer));
  for (int il = 0; il < hp_.n_layer; ++il) {
    const std::string pre = "v.blk." + std::to_string(il) + ".";
    if (f.tensor(pre + "attn_qkv.weight")) f.fail("fused attn_qkv tensors are not supported");
    VisionLayer& L = layers[size_t(il)];
    L.q = matrix(pre + "attn_q.weight", d, qkv);
    L.k = matrix(pre + "attn_k.weight", d, qkv);
    L.v = matrix(pre + "attn_v.weight", d, qkv);
    L.o = matrix(pre + "attn_out.weight", qkv, d);
    L.q_b = vec(pre + "attn_q.bias", qkv, false);
    L.k_b = vec(pre + "attn_k.bias", qkv, false);
    L.v_b = vec(pre + "attn_v.bias", qkv, false);
    L.o_b = vec(pre + "attn_out.bias", d, false);
    L.ln1_w = vec(pre + "ln1.weight", d, true);
    L.ln1_b = vec(pre + "ln1.bias", d, false);
    L.ln2_w = vec(pre + "ln2.weight", d, true);
    L.ln2_b = vec(pre + "ln2.bias", d, false);
    // Older converters stored ffn_up and ffn_down swapped; llama.cpp detects that by ffn_down's
    // input dimension being n_embd and swaps them back (the same test here, so the same files
    // load the same way).
    std::string up = pre + "ffn_up.", down = pre + "ffn_down.";
    const GgufTensor& dn = f.require_tensor(down + "weight");
    if (dn.ne[0] == d) std::swap(up, down);
    L.up = matrix(up + "weight", d, hp_.n_ff);
    L.down = matrix(down + "weight", hp_.n_ff, d);
    L.up_b = vec(up + "bias", hp_.n_ff, false);
    L.down_b = vec(down + "bias", d, false);
  }
}

void Mmproj::load_projector() {
  const GgufFile& f = *file_;
  const int64_t d = hp_.n_embd;
  if (hp_.projector == ProjectorType::Idefics3) {
    const GgufTensor& t = f.require_tensor("mm.model.fc.weight");
    const int64_t n_in = d * hp_.merge * hp_.merge;
    fc = matrix("mm.model.fc.weight", n_in, t.ne[1]);
    if (f.tensor("mm.model.fc.bias")) f.fail("a bias on mm.model.fc is not supported");
    hp_.n_embd_out = int(t.ne[1]);
    return;
  }
  soft_emb_norm_w = vec("mm.soft_emb_norm.weight", d, true);
  // Stored as ne = [n_out, n_embd] (llama.cpp multiplies by its transpose); re-laid out once as
  // n_out rows of n_embd so it runs on the ordinary matmul kernels.
  const GgufTensor& t = f.require_tensor("mm.input_projection.weight");
  if (t.n_dims != 2 || t.ne[1] != d)
    f.fail("tensor mm.input_projection.weight has shape " + shape_str(t) + ", expected [n_embd_text, " +
           std::to_string(d) + "]");
  const int64_t n_out = t.ne[0];
  size_t elem = 0;
  if (t.type == GgmlType::F32) elem = 4;
  else if (t.type == GgmlType::F16 || t.type == GgmlType::BF16) elem = 2;
  else f.fail(std::string("tensor mm.input_projection.weight has unsupported type ") + ggml_type_info(t.type).name);
  input_proj_rows.resize(size_t(n_out * d) * elem);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t o = 0; o < n_out; ++o)
      std::memcpy(&input_proj_rows[size_t(o * d + i) * elem], t.data + size_t(i * n_out + o) * elem, elem);
  input_proj = VisionMatrix{t.type, input_proj_rows.data(), d, n_out};
  hp_.n_embd_out = int(n_out);
}

void Mmproj::require_text_embd(int64_t text_n_embd) const {
  if (text_n_embd != hp_.n_embd_out)
    file_->fail(std::string(projector_type_name(hp_.projector)) + " projector outputs " +
                std::to_string(hp_.n_embd_out) + "-wide embeddings but the text model's n_embd is " +
                std::to_string(text_n_embd));
}

int Mmproj::tokens_per_image() const {
  const int n_side = hp_.image_size / hp_.patch_size / hp_.merge;
  return n_side * n_side;
}

}  // namespace ls
