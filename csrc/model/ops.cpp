#include "model/ops.h"

#include <cmath>

// One clone for AVX2+FMA machines, one portable; the dynamic loader picks via ifunc.
#define LS_MULTIVERSION __attribute__((target_clones("arch=haswell", "default")))

namespace ls {

LS_MULTIVERSION void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  const float scale = float(1.0 / std::sqrt(sum / double(n) + double(eps)));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

LS_MULTIVERSION void add_f32(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

LS_MULTIVERSION void scale_f32(float* y, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

void silu_mul(float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
}

RopeTable::RopeTable(float base, int n_rot, int n_pos)
    : cos_(size_t(n_pos) * size_t(n_rot / 2)), sin_(size_t(n_pos) * size_t(n_rot / 2)), half_(n_rot / 2) {
  inv_freq_.resize(half_);
  for (int i = 0; i < half_; ++i) inv_freq_[i] = std::pow(double(base), -2.0 * i / n_rot);
}

void RopeTable::ensure(int n_pos) {
  for (; rows_ready_ < n_pos; ++rows_ready_) {
    float* c = cos_.data() + int64_t(rows_ready_) * half_;
    float* s = sin_.data() + int64_t(rows_ready_) * half_;
    for (int i = 0; i < half_; ++i) {
      const double theta = rows_ready_ * inv_freq_[i];
      c[i] = float(std::cos(theta));
      s[i] = float(std::sin(theta));
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
