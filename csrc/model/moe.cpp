// The mixture-of-experts FFN (qwen3moe, llama/Mixtral, gpt-oss): route each token to its best experts, run
// every chosen expert once over all the tokens that chose it, and sum each token's expert outputs.
//
// Why grouped: an expert's weights are the cost of a step (Qwen3-30B-A3B reads 8 of 128 experts of
// ~4.5 MB each per layer at Q4_K); tokens gathered per expert read each chosen expert once per
// step however many batch rows chose it (a batch of 8 decoding sequences that all pick expert 3
// reads expert 3 once).
//
// Determinism: a matmul row's result does not depend on which other rows share the call (quant.h),
// so gathering changes no bit; each token sums its own expert outputs in its own selection order
// (best first, llama.cpp's order of adds). A token's result is therefore the same alone or batched
// with tokens that chose other experts, on any thread count.
#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "model/model.h"

namespace ls {

Weight ExpertWeights::expert(int e) const {
  Weight w = all;
  w.n_out = rows;
  const size_t bytes = all.layout == WeightLayout::Interleaved16
                           ? interleaved_bytes(all.type, all.n_in, int64_t(e) * rows)
                           : ggml_row_bytes(all.type, all.n_in) * size_t(e) * size_t(rows);
  w.data = all.data + bytes;
  return w;
}

namespace {

// Softmax as ggml's CPU op: exp(x − max) in float, the sum in double, then × (1 / sum).
void softmax_ggml(const float* x, int n, float* out) {
  float max = -INFINITY;
  for (int e = 0; e < n; ++e) max = std::max(max, x[e]);
  double sum = 0.0;
  for (int e = 0; e < n; ++e) {
    out[e] = std::exp(x[e] - max);
    sum += double(out[e]);
  }
  const float inv = float(1.0 / sum);
  for (int e = 0; e < n; ++e) out[e] *= inv;
}

// The k best of v[0..n) into order[0..k), best first (ggml_argsort_top_k: a descending sort; equal
// values keep the lower index first). order has room for n entries (the rest is left permuted).
void top_k(const float* v, int n, int k, int32_t* order) {
  std::iota(order, order + n, 0);
  std::partial_sort(order, order + k, order + n,
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
}

}  // namespace

void moe_route(const float* logits, int n_expert, int k, int32_t* ids, float* weights) {
  float probs[kMaxExperts];
  softmax_ggml(logits, n_expert, probs);
  int32_t order[kMaxExperts];
  top_k(probs, n_expert, k, order);
  // norm_w: divide by the float sum of the chosen probabilities (ggml_sum_rows, in order), clamped.
  float chosen = 0.0f;
  for (int j = 0; j < k; ++j) chosen += probs[order[j]];
  chosen = std::max(chosen, 6.103515625e-5f);
  for (int j = 0; j < k; ++j) {
    ids[j] = order[j];
    weights[j] = probs[order[j]] / chosen;
  }
}

void moe_route_softmax_weight(const float* logits, int n_expert, int k, int32_t* ids, float* weights) {
  int32_t order[kMaxExperts];
  top_k(logits, n_expert, k, order);
  float chosen[kMaxExperts];
  for (int j = 0; j < k; ++j) {
    ids[j] = order[j];
    chosen[j] = logits[order[j]];
  }
  softmax_ggml(chosen, k, weights);
}

void swiglu_oai_mul(float* gate, const float* up, int64_t n) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;  // llama.cpp's constants for gpt-oss (no GGUF key)
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(gate[i], kLimit), y = std::clamp(up[i], -kLimit, kLimit);
    gate[i] = x / (1.f + std::exp(kAlpha * (-x))) * (y + 1.f);
  }
}

void ModelRuntime::moe_ffn(const LayerWeights& L, const float* x, int n, float* y) {
  const ModelConfig& c = cfg_;
  const int64_t E = c.n_embd, F = c.n_ff_exp;
  const int K = c.n_expert_used, n_pairs = n * K;

  // 1. Router: logits of every expert, then each token's choice (independent per token).
  project(L.ffn_gate_inp, x, n, moe_logits_.data());
  for (int i = 0; i < n; ++i) {
    float* logits = moe_logits_.data() + int64_t(i) * c.n_expert;
    if (!L.b_router.empty()) add_f32(logits, L.b_router.data(), c.n_expert);
    auto route = c.moe_oai ? &moe_route_softmax_weight : &moe_route;
    route(logits, c.n_expert, K, moe_ids_.data() + int64_t(i) * K, moe_weights_.data() + int64_t(i) * K);
  }

  // 2. Group the (token, slot) pairs by expert (counting sort: stable, so token order within a group).
  std::fill(moe_first_.begin(), moe_first_.end(), 0);
  for (int p = 0; p < n_pairs; ++p) moe_first_[moe_ids_[p] + 1] += 1;
  for (int e = 0; e < c.n_expert; ++e) moe_first_[e + 1] += moe_first_[e];
  std::copy(moe_first_.begin(), moe_first_.end() - 1, moe_next_.begin());
  for (int p = 0; p < n_pairs; ++p) moe_pairs_[moe_next_[moe_ids_[p]]++] = p;
  for (int r = 0; r < n_pairs; ++r) moe_row_[moe_pairs_[r]] = r;

  // 3. Every chosen expert once over its gathered rows, all experts of the layer in one dispatch per
  //    product (llama.cpp's mul_mat_id): gate and up, the activation, then down into moe_y_.
  //    Row r of moe_x_ / ffn_a_ / ffn_b_ / moe_y_ is the r-th pair in expert order.
  for (int r = 0; r < n_pairs; ++r)
    std::memcpy(moe_x_.data() + int64_t(r) * E, x + int64_t(moe_pairs_[r] / K) * E, sizeof(float) * size_t(E));
  // Each chosen expert's rows of one product: (its weight, its rows of x, their outputs).
  auto expert_outs = [&](const ExpertWeights& w, float* y, int64_t y_width, MatmulOut* outs) {
    int n_outs = 0;
    for (int e = 0; e < c.n_expert; ++e) {
      const int r0 = moe_first_[e], m = moe_first_[e + 1] - r0;
      if (m > 0) outs[n_outs++] = MatmulOut{w.expert(e).data, w.rows, y + int64_t(r0) * y_width, y_width, r0, m};
    }
    return n_outs;
  };
  auto run = [&](const ExpertWeights& w, const float* in, int64_t n_in, const MatmulOut* outs, int n_outs) {
    matmul_multi(*pool_, mm_scratch_, w.all.type, n_in, in, n_pairs, outs, n_outs, w.all.layout);
  };
  MatmulOut* outs = moe_outs_.data();
  const int n_gate = expert_outs(L.gate_exps, ffn_a_.data(), F, outs);
  if (L.up_exps.all.type == L.gate_exps.all.type && L.up_exps.all.layout == L.gate_exps.all.layout) {
    expert_outs(L.up_exps, ffn_b_.data(), F, outs + n_gate);  // one quantization of x and one dispatch
    run(L.gate_exps, moe_x_.data(), E, outs, 2 * n_gate);
  } else {
    run(L.gate_exps, moe_x_.data(), E, outs, n_gate);
    expert_outs(L.up_exps, ffn_b_.data(), F, outs);
    run(L.up_exps, moe_x_.data(), E, outs, n_gate);
  }
  if (!L.b_gate_exps.empty())  // gpt-oss: each expert's own biases (ggml_add_id)
    for (int r = 0; r < n_pairs; ++r) {
      const int64_t e = moe_ids_[moe_pairs_[r]];
      add_f32(ffn_a_.data() + int64_t(r) * F, L.b_gate_exps.data() + e * F, F);
      add_f32(ffn_b_.data() + int64_t(r) * F, L.b_up_exps.data() + e * F, F);
    }
  pool_->parallel_for(int64_t(n_pairs) * F, 1024, [&](int64_t b, int64_t end) {
    if (c.moe_oai) swiglu_oai_mul(ffn_a_.data() + b, ffn_b_.data() + b, end - b);
    else silu_mul(ffn_a_.data() + b, ffn_b_.data() + b, end - b);
  });
  run(L.down_exps, ffn_a_.data(), F, outs, expert_outs(L.down_exps, moe_y_.data(), E, outs));
  if (!L.b_down_exps.empty())
    for (int r = 0; r < n_pairs; ++r)
      add_f32(moe_y_.data() + int64_t(r) * E, L.b_down_exps.data() + int64_t(moe_ids_[moe_pairs_[r]]) * E, E);

  // 4. Each token: Σ_j weight_j · expert_j(x), adds in selection order (llama.cpp: ggml_mul, then
  //    ggml_add of the views one after another).
  pool_->parallel_for(n, 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      float* out = y + i * E;
      for (int j = 0; j < K; ++j) {
        const int64_t p = i * K + j;
        const float w = moe_weights_[p];
        const float* ye = moe_y_.data() + int64_t(moe_row_[p]) * E;
        if (j == 0)
          for (int64_t d = 0; d < E; ++d) out[d] = ye[d] * w;
        else
          for (int64_t d = 0; d < E; ++d) out[d] += ye[d] * w;
      }
    }
  });
}

void ModelRuntime::last_experts(int row, int32_t* out) const {
  if (cfg_.n_expert == 0 || row < 0 || row >= last_batch_) throw std::invalid_argument("last_experts: no such MoE row");
  std::copy(moe_ids_.begin() + int64_t(row) * cfg_.n_expert_used, moe_ids_.begin() + int64_t(row + 1) * cfg_.n_expert_used, out);
}

}  // namespace ls
