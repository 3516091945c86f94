#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace ls {
namespace {

// The pair index whose wavelength 2π/θ_i fits n_rotations times into n_ctx_orig positions:
// solving n_ctx_orig = n_rotations · 2π · base^(2i/n_rot) for i.
float corr_dim(int n_rot, int n_ctx_orig, float n_rotations, float base) {
  return float(n_rot) * std::log(float(n_ctx_orig) / (n_rotations * 2.0f * float(M_PI))) / (2.0f * std::log(base));
}

}  // namespace

void yarn_corr_dims(int n_rot, int n_ctx_orig, float base, float beta_fast, float beta_slow, float dims[2]) {
  dims[0] = std::max(0.0f, std::floor(corr_dim(n_rot, n_ctx_orig, beta_fast, base)));
  dims[1] = std::min(float(n_rot - 1), std::ceil(corr_dim(n_rot, n_ctx_orig, beta_slow, base)));
}

RopeTable::RopeTable(float base, int n_rot, int n_pos, const RopeScaling& s, const std::vector<float>& freq_factors)
    : cos_(size_t(n_pos) * size_t(n_rot / 2)), sin_(size_t(n_pos) * size_t(n_rot / 2)), half_(n_rot / 2) {
  freq_.resize(half_);
  mix_.assign(half_, 0.0);
  for (int i = 0; i < half_; ++i) {
    freq_[i] = std::pow(double(base), -2.0 * i / n_rot);
    if (!freq_factors.empty()) freq_[i] /= double(freq_factors[i]);
  }
  freq_scale_ = s.freq_scale;
  float mscale = s.attn_factor;
  if (s.ext_factor != 0.0f) {
    float dims[2];
    yarn_corr_dims(n_rot, s.n_ctx_orig, base, s.beta_fast, s.beta_slow, dims);
    for (int i = 0; i < half_; ++i) {
      const float y = (float(i) - dims[0]) / std::max(0.001f, dims[1] - dims[0]);
      mix_[i] = (1.0f - std::min(1.0f, std::max(0.0f, y))) * s.ext_factor;
    }
    mscale *= 1.0f + 0.1f * std::log(1.0f / s.freq_scale);
  }
  mscale_ = mscale;
}

void RopeTable::ensure(int n_pos) {
  for (; rows_ready_ < n_pos; ++rows_ready_) {
    float* c = cos_.data() + int64_t(rows_ready_) * half_;
    float* s = sin_.data() + int64_t(rows_ready_) * half_;
    for (int i = 0; i < half_; ++i) {
      const double extrap = rows_ready_ * freq_[i];
      const double interp = freq_scale_ * extrap;
      const double theta = mix_[i] == 0.0 ? interp : interp * (1.0 - mix_[i]) + extrap * mix_[i];
      c[i] = float(std::cos(theta) * mscale_);
      s[i] = float(std::sin(theta) * mscale_);
    }
  }
}

void rope_apply(float* x, const float* cos_t, const float* sin_t, int n_rot, bool neox) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const float x0 = x[i0], x1 = x[i1];
    x[i0] = x0 * cos_t[i] - x1 * sin_t[i];
    x[i1] = x0 * sin_t[i] + x1 * cos_t[i];
  }
}

}  // namespace ls
