// Mixture-of-experts routing and gpt-oss's expert activation as llama.cpp computes them
// (llm_graph_context::build_moe_ffn): qwen3moe and llama (Mixtral) files with gating softmax, norm_w =
// true, no weight scale; gpt-oss with gating softmax_weight, norm_w = false, LLM_FFN_SWIGLU_OAI_MOE.
#pragma once

#include <cstdint>

namespace ls {

constexpr int kMaxExperts = 1024;  // llama.cpp's LLAMA_MAX_EXPERTS

// One token's router: softmax over all n_expert logits, the k most probable experts (ids, best
// first; equal probabilities keep the lower index first), and their probabilities divided by their
// sum (clamped below at 2^-14, as llama.cpp guards the division). weights[j] belongs to ids[j].
void moe_route(const float* logits, int n_expert, int k, int32_t* ids, float* weights);

// gpt-oss's router: the k largest logits (ids best first, ties to the lower index), and a softmax
// over those k alone (ggml's soft_max of the selected row). weights[j] belongs to ids[j].
void moe_route_softmax_weight(const float* logits, int n_expert, int k, int32_t* ids, float* weights);

// gpt-oss's gated activation (ggml's swiglu_oai, alpha 1.702, limit 7): for i < n,
// x = min(gate[i], 7), y = clamp(up[i], −7, 7), gate[i] = x / (1 + exp(−1.702·x)) · (y + 1).
void swiglu_oai_mul(float* gate, const float* up, int64_t n);

}  // namespace ls
