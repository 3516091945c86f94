// Rotary position embedding: the per-position cos/sin table (with llama.cpp's frequency
// factors, linear and YaRN scaling folded in) and its application to one head.
//
// For rotary pair i (0 ≤ i < n_rot/2) at position pos, as ggml's rope computes it:
//   θ_extrap = pos · base^(−2i/n_rot) / ff[i]            ff = rope_freqs.weight, else 1
//   θ_interp = freq_scale · θ_extrap                     freq_scale = 1/factor (linear, yarn)
//   YaRN (ext_factor ≠ 0):  mix = ext_factor · ramp(i), ramp = 1 − clamp((i − lo)/max(0.001, hi − lo), 0, 1)
//                           θ = θ_interp·(1 − mix) + θ_extrap·mix
//                           mscale = attn_factor · (1 + 0.1·ln(1/freq_scale))
//   otherwise               θ = θ_interp, mscale = attn_factor
//   cos = cos(θ)·mscale, sin = sin(θ)·mscale   (both q and k are rotated, so q·k scales by mscale²)
// lo/hi ("correction dims") are the pair indices whose wavelength fits beta_fast / beta_slow
// times into the original context (yarn_corr_dims).
#pragma once

#include <cstdint>
#include <vector>

#include "common/lazy_array.h"

namespace ls {

// The model-level scaling of the rotary angles (llama.cpp's cparams after context setup).
struct RopeScaling {
  float freq_scale = 1.f;   // multiplies every angle (1/factor for linear and yarn)
  float ext_factor = 0.f;   // yarn: 1 (weight of the extrapolated angle on fast pairs); else 0
  float attn_factor = 1.f;  // multiplies cos and sin (yarn mscale correction × rope.scaling.attn_factor)
  float beta_fast = 32.f;   // yarn ramp ends: rotations over the original context
  float beta_slow = 1.f;
  int32_t n_ctx_orig = 0;   // tokens: the context the unscaled model was trained on
};

// The yarn ramp's [lo, hi] in rotary-pair units, computed in float exactly as ggml does
// (floor/ceil of a float value: computing it in double could move an edge by one pair).
void yarn_corr_dims(int n_rot, int n_ctx_orig, float base, float beta_fast, float beta_slow, float dims[2]);

// cos/sin rows [n_pos][n_rot/2] per the formula above. A row is computed when a forward first
// reaches its position (ensure), so only positions used are resident (Gemma 3's two bases at
// 4096 positions would be 8 MB per lane up front). With no scaling and no factors the values are
// float(cos(pos · base^(−2i/n_rot))) computed in double, as before scaling existed.
class RopeTable {
 public:
  RopeTable() = default;
  // freq_factors: [n_rot/2] divisors of the pair frequencies, or empty.
  RopeTable(float base, int n_rot, int n_pos, const RopeScaling& scaling = {},
            const std::vector<float>& freq_factors = {});
  void ensure(int n_pos);  // rows [0, n_pos) are ready; n_pos ≤ the size given at construction
  const float* cos_row(int pos) const { return cos_.data() + int64_t(pos) * half_; }
  const float* sin_row(int pos) const { return sin_.data() + int64_t(pos) * half_; }

 private:
  std::vector<double> freq_;   // [n_rot/2] radians per position: base^(−2i/n_rot) / ff[i]
  std::vector<double> mix_;    // [n_rot/2] yarn weight of the extrapolated angle (0 without yarn)
  double freq_scale_ = 1.0;
  double mscale_ = 1.0;
  LazyArray<float> cos_, sin_;  // [n_pos][n_rot/2]
  int half_ = 0, rows_ready_ = 0;
};

// Rotates the first n_rot dims of one head in place: adjacent pairs (norm) or halves (neox).
void rope_apply(float* x, const float* cos_t, const float* sin_t, int n_rot, bool neox);

}  // namespace ls
