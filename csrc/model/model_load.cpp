// ModelRuntime's loading half: hyperparameters from the GGUF keys and weights by tensor name.
// Every tensor of the file is either read here or the file is refused naming it: a tensor the
// forward pass ignored (a bias, a scaling table) would make it compute a different model.
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "model/model.h"
#include "model/moe.h"

namespace ls {
namespace {

std::string key(const ModelConfig& c, const char* suffix) { return c.arch_name + "." + suffix; }

// Reads tensors by name and records which ones the forward pass will read.
class TensorReader {
 public:
  explicit TensorReader(const GgufFile& f) : f_(f) {}

  const GgufTensor* find(const std::string& name) {
    const GgufTensor* t = f_.tensor(name);
    if (t) used_.insert(name);
    return t;
  }

  // A 1-D tensor of n elements, dequantized to fp32; empty if absent and not required.
  std::vector<float> vector(const std::string& name, int64_t n, bool required = true) {
    const GgufTensor* t = find(name);
    if (!t) {
      if (required) f_.fail("missing tensor " + name);
      return {};
    }
    if (t->n_elements() != n) f_.fail("tensor " + name + " has " + std::to_string(t->n_elements()) +
                                      " elements, expected " + std::to_string(n));
    std::vector<float> out(n);
    dequantize_row(t->type, t->data, out.data(), n);
    return out;
  }

  // A 2-D weight [n_in, n_out] (ne0 = n_in), used in place.
  Weight weight(const std::string& name, int64_t n_in, int64_t n_out) {
    const GgufTensor* t = find(name);
    if (!t) f_.fail("missing tensor " + name);
    if (t->n_dims != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
      f_.fail("tensor " + name + " has shape [" + std::to_string(t->ne[0]) + ", " + std::to_string(t->ne[1]) +
              "], expected [" + std::to_string(n_in) + ", " + std::to_string(n_out) + "]");
    if (!ggml_type_supported(t->type))
      f_.fail(std::string("tensor ") + name + " has unsupported type " + ggml_type_info(t->type).name);
    return Weight{t->type, t->data, n_in, n_out};
  }

  // A 3-D expert tensor [n_in, rows, n_expert] (ne0 = n_in), used in place.
  ExpertWeights experts(const std::string& name, int64_t n_in, int64_t rows, int64_t n_expert) {
    const GgufTensor* t = find(name);
    if (!t) f_.fail("missing tensor " + name);
    if (t->n_dims != 3 || t->ne[0] != n_in || t->ne[1] != rows || t->ne[2] != n_expert)
      f_.fail("tensor " + name + " has the wrong shape, expected [" + std::to_string(n_in) + ", " + std::to_string(rows) +
              ", " + std::to_string(n_expert) + "]");
    if (!ggml_type_supported(t->type))
      f_.fail(std::string("tensor ") + name + " has unsupported type " + ggml_type_info(t->type).name);
    return ExpertWeights{Weight{t->type, t->data, n_in, rows * n_expert}, rows};
  }

  // Throws naming the first tensors (in file order) the forward pass would not read.
  void refuse_unused(const std::string& arch) const {
    std::vector<std::string> unused;
    for (const GgufTensor& t : f_.tensors())
      if (!used_.count(t.name)) unused.push_back(t.name);
    if (unused.empty()) return;
    std::string names = unused[0];
    for (size_t i = 1; i < std::min<size_t>(unused.size(), 5); ++i) names += ", " + unused[i];
    if (unused.size() > 5) names += " and " + std::to_string(unused.size() - 5) + " more";
    f_.fail("unsupported tensor" + std::string(unused.size() > 1 ? "s " : " ") + names + " for architecture " +
            arch + " (the " + arch + " forward pass does not use " + (unused.size() > 1 ? "them" : "it") + ")");
  }

 private:
  const GgufFile& f_;
  std::unordered_set<std::string> used_;
};

// The rope scaling keys resolved the way llama.cpp does (llama_model::load_hparams, then the
// context setup in llama_context): an absent type means "linear" with the factor from
// rope.scaling.factor (or the older rope.scale_linear), so a file with only a factor is scaled;
// factor 0/absent = 1; "none" never scales. YaRN's ext_factor is 1 and beta_fast/beta_slow keep
// llama.cpp's defaults 32/1: for llama, qwen2, qwen3 and gemma3 llama.cpp does not read the
// rope.scaling.yarn_* keys, and we match its output. Arithmetic in float, as there.
void load_rope_scaling(const GgufFile& f, ModelConfig& c) {
  const std::string type = f.get_string(key(c, "rope.scaling.type"), "linear");
  if (type != "none" && type != "linear" && type != "yarn")
    f.fail("unsupported rope scaling '" + type + "' (supported: none, linear, yarn)");
  const float factor = float(f.get_float(key(c, "rope.scaling.factor"), f.get_float(key(c, "rope.scale_linear"), 0.0)));
  if (!(factor >= 0.0f) || !std::isfinite(factor)) f.fail("invalid " + key(c, "rope.scaling.factor"));
  RopeScaling& s = c.rope_scaling;
  s.freq_scale = type == "none" || factor == 0.0f ? 1.0f : 1.0f / factor;
  s.n_ctx_orig = int32_t(f.get_int(key(c, "rope.scaling.original_context_length"), 0));
  if (s.n_ctx_orig <= 0) s.n_ctx_orig = c.n_ctx_train;
  s.ext_factor = type == "yarn" ? 1.0f : 0.0f;
  if (s.ext_factor != 0.0f && s.n_ctx_orig <= 0) f.fail("yarn rope scaling needs the original context length");
  s.attn_factor = 1.0f;
  if (s.ext_factor != 0.0f) {
    // mscale = 1 + 0.1·ln(factor) for factor > 1; rope applies (1 + 0.1·ln(1/freq_scale)) on top
    // whenever ext_factor ≠ 0, which llama.cpp cancels here so the net mscale is applied once.
    const float stretch = 1.0f / s.freq_scale;  // the context factor
    s.attn_factor = stretch <= 1.0f ? 1.0f : 0.1f * std::log(stretch) + 1.0f;
    s.attn_factor *= 1.0f / (1.0f + 0.1f * std::log(stretch));
  }
  s.attn_factor *= float(f.get_float(key(c, "rope.scaling.attn_factor"), 1.0));
  c.rope_scaling_local = s;
  c.rope_scaling_local.freq_scale = 1.0f;  // llama.cpp: rope_freq_scale_train_swa, no key read
  c.rope_scaling_type = type;
  c.rope_scaling_factor = 1.0f / s.freq_scale;

  // Longest context: the training one, or the original context × factor when scaling extends it
  // (no limit when the file does not say its training context).
  c.n_ctx_max = c.n_ctx_train > 0 ? c.n_ctx_train : (1 << 24);
  if (type != "none" && c.rope_scaling_factor > 1.0f && s.n_ctx_orig > 0)
    c.n_ctx_max = int32_t(std::min<double>(std::max<double>(c.n_ctx_max, double(s.n_ctx_orig) * c.rope_scaling_factor),
                                           double(1 << 24)));
}

// The expert keys, checked against the one routing llama.cpp runs for each architecture (llama and
// qwen3moe: softmax over all experts, top k, weights renormalised; gpt-oss: top k of the logits, softmax
// over those, not renormalised; unscaled, no expert groups): llama.cpp does not read these keys for
// them, so a file that states another routing is refused rather than run differently.
void load_moe_config(const GgufFile& f, ModelConfig& c) {
  const bool oss = c.arch == Arch::GptOss;
  const int64_t n_expert = f.get_int(key(c, "expert_count"), 0), n_used = f.get_int(key(c, "expert_used_count"), 0);
  if (n_expert <= 0) {
    if (c.arch == Arch::Qwen3Moe || oss)
      f.fail("missing or invalid " + key(c, "expert_count") + " (" + c.arch_name + " needs experts)");
    return;  // dense
  }
  if (c.arch != Arch::Llama && c.arch != Arch::Qwen3Moe && !oss)
    f.fail(c.arch_name + " files with experts (" + key(c, "expert_count") + ") are not supported (MoE: llama, qwen3moe, gpt-oss)");
  if (n_expert > kMaxExperts) f.fail("invalid " + key(c, "expert_count") + " " + std::to_string(n_expert));
  if (n_used <= 0 || n_used > n_expert) f.fail("missing or invalid " + key(c, "expert_used_count"));
  static const char* const kGating[] = {"none", "softmax", "sigmoid", "softmax_weight", "sqrt_softplus"};
  const int64_t want_gating = oss ? 3 : 1;
  const int64_t gating = f.get_int(key(c, "expert_gating_func"), want_gating);
  if (gating != want_gating)
    f.fail("unsupported " + key(c, "expert_gating_func") + " " + std::to_string(gating) +
           (gating >= 0 && gating <= 4 ? std::string(" (") + kGating[gating] + ")" : std::string(" (unknown)")) +
           ": " + c.arch_name + " experts are routed by " + kGating[want_gating] + " (" + std::to_string(want_gating) + ")");
  if (f.get_bool(key(c, "expert_weights_norm"), !oss) == oss)
    f.fail("unsupported " + key(c, "expert_weights_norm") + (oss ? " true: " : " false: ") + c.arch_name +
           (oss ? " does not renormalise" : " renormalises") + " the chosen experts' weights");
  const double scale = f.get_float(key(c, "expert_weights_scale"), 0.0);
  if (scale != 0.0 && scale != 1.0) f.fail("unsupported " + key(c, "expert_weights_scale") + " (" + c.arch_name + " does not scale)");
  if (f.get_int(key(c, "expert_group_count"), 0) > 1) f.fail("unsupported " + key(c, "expert_group_count") + " (expert groups)");
  c.n_expert = int32_t(n_expert);
  c.n_expert_used = int32_t(n_used);
  // llama.cpp: qwen3moe's experts are expert_feed_forward_length wide (else n_ff / n_used); gpt-oss's
  // expert_feed_forward_length (required); llama's n_ff.
  c.n_ff_exp = c.arch == Arch::Qwen3Moe ? int32_t(f.get_int(key(c, "expert_feed_forward_length"), c.n_ff / n_used))
               : oss                    ? int32_t(f.get_int(key(c, "expert_feed_forward_length"), 0))
                                        : c.n_ff;
  c.moe_oai = oss;
  if (c.n_ff_exp <= 0 || c.n_ff_exp > (1 << 24)) f.fail("invalid " + key(c, "expert_feed_forward_length"));
}

// gpt-oss (llama.cpp's llama_model_openai_moe): every other layer (0, 2, …) attends to a sliding
// window, with its own rope base if the file gives one and the global layers' rope scaling; q·k is
// scaled by 1/sqrt(n_rot), whatever attention.scale says.
void load_gpt_oss_config(const GgufFile& f, ModelConfig& c) {
  c.sliding_window = int32_t(f.get_int(key(c, "attention.sliding_window"), 0));
  if (c.sliding_window <= 0) f.fail("missing or invalid " + key(c, "attention.sliding_window"));
  c.swa_pattern = int32_t(f.get_int(key(c, "attention.sliding_window_pattern"), 2));
  if (c.swa_pattern != 2) f.fail("unsupported " + key(c, "attention.sliding_window_pattern") + " (gpt-oss alternates: 2)");
  c.rope_base_local = float(f.get_float(key(c, "rope.freq_base_swa"), c.rope_base));
  c.rope_scaling_local = c.rope_scaling;
  c.attn_scale = 1.0f / std::sqrt(float(c.n_rot));
  if (c.n_ff_exp <= 0) f.fail("missing or invalid " + key(c, "expert_feed_forward_length"));
}

// Rows [r0, r0 + n) of a 2-D weight in the file's row layout (slices of phi3's fused tensors).
Weight weight_rows(const Weight& w, int64_t r0, int64_t n) {
  return Weight{w.type, w.data + size_t(r0) * ggml_row_bytes(w.type, w.n_in), w.n_in, n, w.layout};
}

}  // namespace

void ModelRuntime::load_config(const GgufFile& f) {
  ModelConfig& c = cfg_;
  c.arch_name = f.get_string("general.architecture", "");
  if (c.arch_name == "llama") c.arch = Arch::Llama;
  else if (c.arch_name == "qwen2") c.arch = Arch::Qwen2;
  else if (c.arch_name == "qwen3") c.arch = Arch::Qwen3;
  else if (c.arch_name == "gemma3") c.arch = Arch::Gemma3;
  else if (c.arch_name == "granite") c.arch = Arch::Granite;
  else if (c.arch_name == "olmo2") c.arch = Arch::Olmo2;
  else if (c.arch_name == "smollm3") c.arch = Arch::SmolLM3;
  // phi3: its attention.sliding_window is not applied — llama.cpp disables Phi's SWA (the released
  // files' windows do not describe how the models were trained), and we match llama.cpp.
  else if (c.arch_name == "phi3") c.arch = Arch::Phi3;
  else if (c.arch_name == "qwen3moe") c.arch = Arch::Qwen3Moe;
  else if (c.arch_name == "gpt-oss") c.arch = Arch::GptOss;
  else f.fail("unsupported architecture '" + c.arch_name + "' (supported: llama, qwen2, qwen3, gemma3, granite, olmo2, smollm3, phi3, qwen3moe, gpt-oss)");

  auto req_int = [&](const char* suffix) {
    int64_t v = f.get_int(key(c, suffix), -1);
    if (v <= 0 || v > (int64_t(1) << 24)) f.fail("missing or invalid " + key(c, suffix));
    return int32_t(v);
  };
  c.n_layer = req_int("block_count");
  c.n_embd = req_int("embedding_length");
  // gpt-oss files need no feed_forward_length (llama.cpp does not require it; every layer is MoE).
  c.n_ff = c.arch == Arch::GptOss ? int32_t(f.get_int(key(c, "feed_forward_length"), 0)) : req_int("feed_forward_length");
  load_moe_config(f, c);
  c.n_head = req_int("attention.head_count");
  c.n_head_kv = int32_t(f.get_int(key(c, "attention.head_count_kv"), c.n_head));
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) f.fail("invalid attention.head_count_kv");
  c.head_dim = int32_t(f.get_int(key(c, "attention.key_length"), c.n_embd / c.n_head));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0 || c.head_dim > kMaxHeadDim || f.get_int(key(c, "attention.value_length"), c.head_dim) != c.head_dim)
    f.fail("unsupported attention key/value length");
  c.n_ctx_train = int32_t(std::min<int64_t>(f.get_int(key(c, "context_length"), 4096), 1 << 24));  // ≤ 0: unknown
  c.rms_eps = float(f.get_float(key(c, "attention.layer_norm_rms_epsilon"), 1e-5));
  c.n_rot = int32_t(f.get_int(key(c, "rope.dimension_count"), c.head_dim));
  if (c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_rot % 2 != 0) f.fail("invalid rope.dimension_count");
  load_rope_scaling(f, c);
  c.rope = c.arch == Arch::Llama || c.arch == Arch::Granite || c.arch == Arch::SmolLM3 ? RopeStyle::Norm : RopeStyle::Neox;
  if (c.arch == Arch::SmolLM3) c.no_rope_step = 4;  // fixed in llama.cpp's loader (no GGUF key)
  c.rope_base = float(f.get_float(key(c, "rope.freq_base"), c.arch == Arch::Gemma3 ? 1e6 : 1e4));
  c.attn_scale = float(f.get_float(key(c, "attention.scale"), 1.0 / std::sqrt(double(c.head_dim))));
  if (c.arch == Arch::Granite) {  // llama.cpp: a missing or zero attention.scale means 1/sqrt(head_dim)
    if (c.attn_scale == 0.f) c.attn_scale = 1.0f / std::sqrt(float(c.head_dim));
    c.embd_scale = float(f.get_float(key(c, "embedding_scale"), 1.0));
    c.residual_scale = float(f.get_float(key(c, "residual_scale"), 1.0));
    c.logit_scale = float(f.get_float(key(c, "logit_scale"), 1.0));
    if (!(c.logit_scale != 0.f) || !std::isfinite(c.logit_scale)) f.fail("invalid granite.logit_scale");
  }
  if (c.arch == Arch::Gemma3) {
    c.embd_scale = std::sqrt(float(c.n_embd));
    c.sliding_window = int32_t(f.get_int(key(c, "attention.sliding_window"), 0));
    c.swa_pattern = 6;  // key absent in released files; llama.cpp's default for gemma3
    c.rope_base_local = float(f.get_float(key(c, "rope.freq_base_swa"), 1e4));
    // q is scaled by 1/sqrt(query_pre_attn_scalar) = 1/sqrt(head_dim) for the small models.
    c.attn_scale = 1.0f / std::sqrt(float(c.head_dim));
  }
  if (c.arch == Arch::GptOss) load_gpt_oss_config(f, c);
}

// Which optional tensors each architecture reads follows llama.cpp's loaders (src/models/*.cpp):
// q/k/v biases on all; attention-output and FFN biases and rope_freqs on llama and granite only;
// the LM head bias on qwen2 only; gpt-oss's attention-output, router and expert biases and sinks
// (all required there). Anything else is refused by refuse_unused().
void ModelRuntime::load_weights(const GgufFile& f) {
  ModelConfig& c = cfg_;
  TensorReader r(f);
  const bool llama = c.arch == Arch::Llama || c.arch == Arch::Granite;  // granite = llama's tensors
  const bool oss = c.arch == Arch::GptOss;
  const GgufTensor* emb = r.find("token_embd.weight");
  if (!emb) f.fail("missing tensor token_embd.weight");
  if (emb->n_dims != 2 || emb->ne[0] != c.n_embd) f.fail("token_embd.weight has the wrong width");
  if (!ggml_type_supported(emb->type)) f.fail(std::string("token_embd.weight has unsupported type ") + ggml_type_info(emb->type).name);
  c.n_vocab = int32_t(emb->ne[1]);
  tok_embd_ = Weight{emb->type, emb->data, c.n_embd, c.n_vocab};
  output_ = f.tensor("output.weight") ? r.weight("output.weight", c.n_embd, c.n_vocab) : tok_embd_;
  output_norm_ = r.vector("output_norm.weight", c.n_embd);
  if (c.arch == Arch::Qwen2) output_bias_ = r.vector("output.bias", c.n_vocab, false);
  if (llama) {
    rope_freqs_ = r.vector("rope_freqs.weight", c.n_rot / 2, false);
    for (float ff : rope_freqs_)
      if (!(ff > 0.0f) || !std::isfinite(ff)) f.fail("rope_freqs.weight has a factor that is not a positive number");
  }

  const int64_t E = c.n_embd, q_dim = int64_t(c.n_head) * c.head_dim, kv_dim = int64_t(c.n_head_kv) * c.head_dim;
  layers_.resize(c.n_layer);
  for (int il = 0; il < c.n_layer; ++il) {
    LayerWeights& L = layers_[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    if (c.arch != Arch::Olmo2) {  // olmo2 normalises block outputs only (post-norms below)
      L.attn_norm = r.vector(p + "attn_norm.weight", E);
      // gpt-oss's FFN pre-norm is named post_attention_norm (it follows the attention residual).
      L.ffn_norm = r.vector(p + (oss ? "post_attention_norm.weight" : "ffn_norm.weight"), E);
    }
    if (c.arch == Arch::Phi3) {  // fused q|k|v rows
      const Weight qkv = r.weight(p + "attn_qkv.weight", E, q_dim + 2 * kv_dim);
      L.wq = weight_rows(qkv, 0, q_dim);
      L.wk = weight_rows(qkv, q_dim, kv_dim);
      L.wv = weight_rows(qkv, q_dim + kv_dim, kv_dim);
    } else {
      L.wq = r.weight(p + "attn_q.weight", E, q_dim);
      L.wk = r.weight(p + "attn_k.weight", E, kv_dim);
      L.wv = r.weight(p + "attn_v.weight", E, kv_dim);
    }
    L.wo = r.weight(p + "attn_output.weight", q_dim, E);
    if (c.n_expert > 0) {  // router and experts (llama.cpp reads FFN biases for them on gpt-oss only)
      L.ffn_gate_inp = r.weight(p + "ffn_gate_inp.weight", E, c.n_expert);
      L.gate_exps = r.experts(p + "ffn_gate_exps.weight", E, c.n_ff_exp, c.n_expert);
      L.up_exps = r.experts(p + "ffn_up_exps.weight", E, c.n_ff_exp, c.n_expert);
      L.down_exps = r.experts(p + "ffn_down_exps.weight", c.n_ff_exp, E, c.n_expert);
      if (oss) {
        L.b_router = r.vector(p + "ffn_gate_inp.bias", c.n_expert);
        L.b_gate_exps = r.vector(p + "ffn_gate_exps.bias", int64_t(c.n_expert) * c.n_ff_exp);
        L.b_up_exps = r.vector(p + "ffn_up_exps.bias", int64_t(c.n_expert) * c.n_ff_exp);
        L.b_down_exps = r.vector(p + "ffn_down_exps.bias", int64_t(c.n_expert) * E);
      }
    } else if (c.arch == Arch::Phi3) {  // fused gate|up rows (ggml_swiglu: the first half is the gate)
      const Weight gate_up = r.weight(p + "ffn_up.weight", E, 2 * int64_t(c.n_ff));
      L.w_gate = weight_rows(gate_up, 0, c.n_ff);
      L.w_up = weight_rows(gate_up, c.n_ff, c.n_ff);
    } else {
      L.w_gate = r.weight(p + "ffn_gate.weight", E, c.n_ff);
      L.w_up = r.weight(p + "ffn_up.weight", E, c.n_ff);
    }
    if (c.n_expert == 0) L.w_down = r.weight(p + "ffn_down.weight", c.n_ff, E);
    L.bq = r.vector(p + "attn_q.bias", q_dim, false);
    L.bk = r.vector(p + "attn_k.bias", kv_dim, false);
    L.bv = r.vector(p + "attn_v.bias", kv_dim, false);
    if (llama || oss) L.bo = r.vector(p + "attn_output.bias", E, oss);
    if (oss) L.attn_sinks = r.vector(p + "attn_sinks.weight", c.n_head);
    if (llama && c.n_expert == 0) {
      L.b_gate = r.vector(p + "ffn_gate.bias", c.n_ff, false);
      L.b_up = r.vector(p + "ffn_up.bias", c.n_ff, false);
      L.b_down = r.vector(p + "ffn_down.bias", E, false);
    }
    if (c.arch == Arch::Qwen3 || c.arch == Arch::Qwen3Moe || c.arch == Arch::Gemma3) {
      L.q_norm = r.vector(p + "attn_q_norm.weight", c.head_dim);
      L.k_norm = r.vector(p + "attn_k_norm.weight", c.head_dim);
    }
    if (c.arch == Arch::Olmo2) {  // q/k RMSNorm over the whole projection (all heads at once)
      L.q_norm = r.vector(p + "attn_q_norm.weight", q_dim);
      L.k_norm = r.vector(p + "attn_k_norm.weight", kv_dim);
    }
    if (c.arch == Arch::Gemma3 || c.arch == Arch::Olmo2) {
      L.post_attn_norm = r.vector(p + "post_attention_norm.weight", E);
      L.post_ffw_norm = r.vector(p + "post_ffw_norm.weight", E);
    }
  }
  r.refuse_unused(c.arch_name);
}

}  // namespace ls
