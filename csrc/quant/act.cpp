// Activation quantizers (one implementation for every ISA, so all paths see identical
// integer activations). Q8_0/Q8_1 follow llama.cpp's x86 vector quantizer: d = amax/127,
// q = round-half-even(x * (127/amax)). Q8_K follows ggml's reference (signed max, iscale =
// -127/max, q = min(127, rhe(iscale*x)), d = 1/iscale). Scale fields are stored widened to
// float (fp16-rounded where the ggml format is fp16) so kernels need no conversion.
#include <cmath>

#include "quant/quant_internal.h"

namespace ls::quant {

namespace {
constexpr size_t align64(size_t v) { return (v + 63) & ~size_t(63); }
}  // namespace

ActFormat act_format(GgmlType wt) {
  switch (wt) {
    case GgmlType::Q8_0: return {ActKind::Q8_0, ActOrder::Natural, 128};
    case GgmlType::Q4_0: return {ActKind::Q8_0, ActOrder::PairPerm, 8};
    case GgmlType::Q5_0: return {ActKind::Q8_0, ActOrder::PairPerm, 16};
    // IQ4_NL / MXFP4: the zmm interleaved kernel runs table value + 128 (unsigned); the others ignore the bias.
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4: return {ActKind::Q8_0, ActOrder::PairPerm, 128};
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return {ActKind::Q8_1, ActOrder::PairPerm, 0};
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS: return {ActKind::Q8_K, ActOrder::Natural, 0};
    default: return {ActKind::F32, ActOrder::Natural, 0};
  }
}

ActLayout act_layout(GgmlType wt, int64_t n_in) {
  const ActFormat f = act_format(wt);
  ActLayout l;
  if (f.kind == ActKind::Q8_K) {
    const size_t nsb = size_t(n_in / 256);
    l.sc_off = align64(size_t(n_in));
    l.bias_off = align64(l.sc_off + nsb * 4);
    l.row_bytes = align64(l.bias_off + nsb * 32);
  } else if (f.kind != ActKind::F32) {
    const size_t nbp = (size_t(n_in / 32) + 1) & ~size_t(1);
    l.sc_off = nbp * 32;  // already a multiple of 64
    l.bias_off = align64(l.sc_off + nbp * 8);
    l.row_bytes = f.bias_k ? align64(l.bias_off + nbp / 2 * 64) : l.bias_off;
  }
  return l;
}

namespace {

// Round half to even for |v| < 2^22 without libm (the portable build has no SSE4.1 roundss,
// and nearbyintf would be a call per element): adding 1.5·2^23 forces rounding at the units
// place in the current (round-to-nearest-even) mode. Same result as vroundps/np.rint.
inline float rint_small(float v) {
  constexpr float kMagic = 12582912.f;  // IEEE semantics (no -ffast-math): not folded away
  return (v + kMagic) - kMagic;
}

void quantize_q8_row(const ActFormat& f, const float* x, int64_t n, uint8_t* dst, const ActLayout& lay) {
  const int64_t nb = n / 32, nbp = (nb + 1) & ~int64_t(1);
  auto* q = reinterpret_cast<int8_t*>(dst);
  auto* sc = reinterpret_cast<float*>(dst + lay.sc_off);
  auto* bias = reinterpret_cast<int32_t*>(dst + lay.bias_off);
  if (f.bias_k) std::memset(bias, 0, size_t(nbp / 2) * 64);
  for (int64_t b = 0; b < nbp; ++b) {
    if (b == nb) {  // pad block: zero values and scales
      for (int i = 0; i < 32; ++i) q[act_index(f.order, b, i)] = 0;
      sc[2 * b] = sc[2 * b + 1] = 0.f;
      continue;
    }
    const float* xb = x + 32 * b;
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) {
      const float a = std::fabs(xb[i]);
      amax = a > amax ? a : amax;
    }
    const float d = amax / 127.f;
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int v = int(rint_small(xb[i] * id));
      q[act_index(f.order, b, i)] = int8_t(v);
      sum += v;
    }
    sc[2 * b] = fp16_round(d);
    sc[2 * b + 1] = f.kind == ActKind::Q8_1 ? fp16_round(d * float(sum)) : 0.f;
    if (f.bias_k) {
      const int lane = (b & 1) ? (f.order == ActOrder::Natural ? 8 : 4) : 0;
      bias[(b >> 1) * 16 + lane] = -f.bias_k * sum;
    }
  }
}

void quantize_q8k_row(const float* x, int64_t n, uint8_t* dst, const ActLayout& lay) {
  auto* q = reinterpret_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(dst + lay.sc_off);
  auto* bsums = reinterpret_cast<int16_t*>(dst + lay.bias_off);
  for (int64_t s = 0; s < n / 256; ++s) {
    const float* xs = x + 256 * s;
    float amax = 0.f, mx = 0.f;
    for (int i = 0; i < 256; ++i) {
      const float a = std::fabs(xs[i]);
      if (a > amax) { amax = a; mx = xs[i]; }
    }
    int8_t* qs = q + 256 * s;
    if (amax == 0.f) {
      d[s] = 0.f;
      std::memset(qs, 0, 256);
      std::memset(bsums + 16 * s, 0, 32);
      continue;
    }
    const float iscale = -127.f / mx;
    for (int i = 0; i < 256; ++i) {
      const int v = int(rint_small(iscale * xs[i]));
      qs[i] = int8_t(v < 127 ? v : 127);
    }
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += qs[16 * g + i];
      bsums[16 * s + g] = int16_t(sum);
    }
    d[s] = 1.f / iscale;
  }
}

}  // namespace

void quantize_act_rows(GgmlType wt, const float* x, int64_t n_in, int64_t r0, int64_t r1, uint8_t* dst,
                       const ActLayout& lay) {
  const ActFormat f = act_format(wt);
  for (int64_t r = r0; r < r1; ++r) {
    if (f.kind == ActKind::Q8_K)
      quantize_q8k_row(x + r * n_in, n_in, dst + r * lay.row_bytes, lay);
    else
      quantize_q8_row(f, x + r * n_in, n_in, dst + r * lay.row_bytes, lay);
  }
}

}  // namespace ls::quant
