// Mixture-of-experts routing as llama.cpp computes it for qwen3moe and llama (Mixtral) files
// (llm_graph_context::build_moe_ffn with gating softmax, norm_w = true, no weight scale).
#pragma once

#include <cstdint>

namespace ls {

constexpr int kMaxExperts = 1024;  // llama.cpp's LLAMA_MAX_EXPERTS

// One token's router: softmax over all n_expert logits, the k most probable experts (ids, best
// first; equal probabilities keep the lower index first), and their probabilities divided by their
// sum (clamped below at 2^-14, as llama.cpp guards the division). weights[j] belongs to ids[j].
void moe_route(const float* logits, int n_expert, int k, int32_t* ids, float* weights);

}  // namespace ls
