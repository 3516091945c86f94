// Row softmax in fp32 (ggml_soft_max_ext without a mask), for the vision encoder's attention.
//
// Per row: x ← x·scale, m = max(x), e = exp(x − m) (glibc's expf bit for bit, vectorised: the
// attention kernels' exp_sum, attention_exp.h), sum = Σ e in fp32 in increasing index from 0,
// x ← e · (1/sum). Every row's bits depend only on its own values (never on the row count, the
// thread or the ISA: the AVX2, AVX-512 and portable kernel families give identical bits).
// A row whose every value is −inf gives NaN, as ggml does.
#pragma once

#include <cstdint>

#include "model/attention.h"

namespace ls {

// n_rows rows of n ≥ 1 floats, row stride `stride`, in place, on `kern` (default: the process's
// fastest family, attention_kernels()).
void softmax_rows(float* s, int64_t n_rows, int64_t stride, int n, float scale, const AttentionKernels& kern);
void softmax_rows(float* s, int64_t n_rows, int64_t stride, int n, float scale);

}  // namespace ls
