// Whole-vocabulary loops of the sampler. Two implementations: portable scalar C++ and AVX2+FMA
// intrinsics, chosen once at run time from the *verified* CPU features.
// Both are deterministic; they may differ from each other in the last float bits, which only
// matters across machines, never between runs on one machine.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ls::sampler_kernels {

// Largest value of x[0, n); -inf when n == 0 or all are -inf/NaN (NaN never wins).
float max_of(const float* x, size_t n);

// First index holding the largest value (lowest id on ties); 0 if everything is NaN.
size_t argmax(const float* x, size_t n);

// out[i] = exp((x[i] - shift) * scale), 0 where that is below ~1e-38, -inf or NaN; returns the
// sum in double. Callers pass shift = max(x) so every argument is <= 0 (no overflow). out may
// alias x.
double exp_sum(const float* x, size_t n, float shift, float scale, float* out);

// Writes the indices i with x[i] >= threshold (NaN never passes) in increasing order to
// ids/vals; returns how many. Buffers must hold n entries.
size_t gather(const float* x, size_t n, float threshold, int32_t* ids, float* vals);

// How many x[i] >= threshold (NaN never counts).
size_t count_ge(const float* x, size_t n, float threshold);

// Index of the first i where the running sum of w[0..i] exceeds target (target < sum(w)).
// Falls back to the last non-zero weight if rounding leaves target unreached.
size_t find_cumulative(const float* w, size_t n, double target);

// Test hook: force the portable path even on AVX2 machines (process-wide).
void force_portable(bool on);
bool using_avx2();

// Scalar exp used by the portable path (exposed for the AVX2 file's tails).
float exp_nonpos(float x);

}  // namespace ls::sampler_kernels
