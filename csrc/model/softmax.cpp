#include "model/softmax.h"

namespace ls {

void softmax_rows(float* s, int64_t n_rows, int64_t stride, int n, float scale, const AttentionKernels& kern) {
  // Rows in groups of kAttnKernelGroup: exp_sum advances the groups' sum chains together.
  for (int64_t r0 = 0; r0 < n_rows; r0 += kAttnKernelGroup) {
    const int g = int(n_rows - r0 < kAttnKernelGroup ? n_rows - r0 : kAttnKernelGroup);
    float* rows = s + r0 * stride;
    float m[kAttnKernelGroup], l[kAttnKernelGroup];
    for (int h = 0; h < g; ++h) {
      float* row = rows + h * stride;
      for (int i = 0; i < n; ++i) row[i] *= scale;
      m[h] = kern.max(row, n);
    }
    kern.exp_sum(rows, g, stride, n, m, l);
    for (int h = 0; h < g; ++h) {
      float* row = rows + h * stride;
      const float inv = 1.0f / l[h];
      for (int i = 0; i < n; ++i) row[i] *= inv;
    }
  }
}

void softmax_rows(float* s, int64_t n_rows, int64_t stride, int n, float scale) {
  softmax_rows(s, n_rows, stride, n, scale, attention_kernels());  // follows set_isa, as the text path does
}

}  // namespace ls
