// Scalar reference kernels (portable; the path every SIMD kernel is checked against).
// Per block: exact integer dot of the weight's integer codes with the int8 activations,
// then one float multiply-add with the combined scale, blocks accumulated in order.
#include <cmath>

#include "quant/quant_internal.h"
#include "quant/rows_driver.h"

namespace ls::quant {
namespace {

// Integer code of element i of a simple 32-block, and the per-block offset already applied.
template <GgmlType T>
struct Simple {
  static constexpr int kBytes = T == GgmlType::Q4_0 || T == GgmlType::IQ4_NL ? 18 : T == GgmlType::MXFP4 ? 17
                              : T == GgmlType::Q4_1 ? 20
                              : T == GgmlType::Q5_0 ? 22 : T == GgmlType::Q5_1 ? 24 : 34;
  static constexpr bool kHasMin = T == GgmlType::Q4_1 || T == GgmlType::Q5_1;

  // Signed value code: value = d * code (+ m for the min types).
  static int code(const uint8_t* b, int i) {
    switch (T) {
      case GgmlType::Q8_0: return int8_t(b[2 + i]);
      case GgmlType::Q4_0: return (i < 16 ? b[2 + i] & 15 : b[2 + i - 16] >> 4) - 8;
      case GgmlType::Q4_1: return i < 16 ? b[4 + i] & 15 : b[4 + i - 16] >> 4;
      case GgmlType::IQ4_NL: return kIq4Values[i < 16 ? b[2 + i] & 15 : b[2 + i - 16] >> 4];
      case GgmlType::MXFP4: return kMxfp4Values[i < 16 ? b[1 + i] & 15 : b[1 + i - 16] >> 4];
      case GgmlType::Q5_0: {
        const int nib = i < 16 ? b[6 + i] & 15 : b[6 + i - 16] >> 4;
        return (nib | int((load_u32(b + 2) >> i) & 1) << 4) - 16;
      }
      default: {  // Q5_1
        const int nib = i < 16 ? b[8 + i] & 15 : b[8 + i - 16] >> 4;
        return nib | int((load_u32(b + 4) >> i) & 1) << 4;
      }
    }
  }

  template <int R>
  static void dot(const uint8_t* wrow, const ActView& a, int64_t r, float* out) {
    const ActOrder order = act_format(T).order;
    const int64_t nb = a.n_in / 32;
    float acc[R] = {};
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = wrow + b * kBytes;
      const float d = T == GgmlType::MXFP4 ? e8m0_half_to_f32(blk[0]) : fp16_to_f32(load_u16(blk));
      const float m = kHasMin ? fp16_to_f32(load_u16(blk + 2)) : 0.f;
      int codes[32];
      for (int i = 0; i < 32; ++i) codes[i] = code(blk, i);
      for (int k = 0; k < R; ++k) {
        const int8_t* q = a.q(r + k);
        const float* sc = a.sc(r + k);
        int isum = 0;
        for (int i = 0; i < 32; ++i) isum += codes[i] * q[act_index(order, b, i)];
        if (T == GgmlType::IQ4_NL || T == GgmlType::MXFP4) {  // kernels_lowbit_ymm.h's order, so every path is bit-identical
          acc[k] = std::fma(float(isum), d * sc[2 * b], acc[k]);
          continue;
        }
        acc[k] += (d * sc[2 * b]) * float(isum);
        if (kHasMin) acc[k] += m * sc[2 * b + 1];
      }
    }
    for (int k = 0; k < R; ++k) out[k] = acc[k];
  }
};

// K-quants against Q8_K: per super-block integer sums, one float update per super-block.
template <GgmlType T>
struct KQuant {
  static constexpr int kBytes = T == GgmlType::Q4_K ? 144 : T == GgmlType::Q5_K ? 176 : T == GgmlType::Q2_K ? 84
                              : T == GgmlType::Q3_K ? 110 : T == GgmlType::IQ4_XS ? 136 : 210;
  static constexpr bool kLowBit = T == GgmlType::Q2_K || T == GgmlType::Q3_K || T == GgmlType::IQ4_XS;

  // Unpack the 256 integer codes u and per-16 scales: value = d*scale16[e/16]*u - dmin*min16[e/16]
  static void unpack(const uint8_t* b, int* u, int* scale16, int* min16, float& d, float& dmin) {
    if (T == GgmlType::Q2_K || T == GgmlType::Q3_K) {  // 2-bit codes: element 128h+32k+l in qs[32h+l] bits 2k
      const uint8_t* qs = T == GgmlType::Q2_K ? b + 16 : b + 32;
      for (int e = 0; e < 256; ++e) {
        u[e] = (qs[32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3;
        if (T == GgmlType::Q3_K && !((b[e & 31] >> (e >> 5)) & 1)) u[e] -= 4;
      }
      for (int s = 0; s < 16; ++s) {
        scale16[s] = T == GgmlType::Q2_K ? b[s] & 15 : q3k_scale(b + 96, s);
        min16[s] = T == GgmlType::Q2_K ? b[s] >> 4 : 0;
      }
      d = fp16_to_f32(load_u16(b + (T == GgmlType::Q2_K ? 80 : 108)));
      dmin = T == GgmlType::Q2_K ? fp16_to_f32(load_u16(b + 82)) : 0.f;
      return;
    }
    if (T == GgmlType::IQ4_XS) {
      d = fp16_to_f32(load_u16(b));
      dmin = 0.f;
      for (int ib = 0; ib < 8; ++ib) {
        scale16[2 * ib] = scale16[2 * ib + 1] = iq4xs_scale(b, ib);
        min16[2 * ib] = min16[2 * ib + 1] = 0;
        const uint8_t* qs = b + 8 + 16 * ib;
        for (int j = 0; j < 16; ++j) {
          u[32 * ib + j] = kIq4Values[qs[j] & 15];
          u[32 * ib + j + 16] = kIq4Values[qs[j] >> 4];
        }
      }
      return;
    }
    if (T == GgmlType::Q6_K) {
      d = fp16_to_f32(load_u16(b + 208));
      dmin = 0.f;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      for (int h = 0; h < 2; ++h) {
        const uint8_t* L = b + 64 * h;
        const uint8_t* H = b + 128 + 32 * h;
        for (int l = 0; l < 32; ++l) {
          u[128 * h + l] = ((L[l] & 15) | ((H[l] >> 0) & 3) << 4) - 32;
          u[128 * h + l + 32] = ((L[l + 32] & 15) | ((H[l] >> 2) & 3) << 4) - 32;
          u[128 * h + l + 64] = ((L[l] >> 4) | ((H[l] >> 4) & 3) << 4) - 32;
          u[128 * h + l + 96] = ((L[l + 32] >> 4) | ((H[l] >> 6) & 3) << 4) - 32;
        }
      }
      for (int s = 0; s < 16; ++s) { scale16[s] = sc[s]; min16[s] = 0; }
      return;
    }
    d = fp16_to_f32(load_u16(b));
    dmin = fp16_to_f32(load_u16(b + 2));
    const uint8_t* scales = b + 4;
    const uint8_t* qh = T == GgmlType::Q5_K ? b + 16 : nullptr;
    const uint8_t* qs = T == GgmlType::Q5_K ? b + 48 : b + 16;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      k_scale_min(scales, j, sc, m);
      scale16[2 * j] = scale16[2 * j + 1] = sc;
      min16[2 * j] = min16[2 * j + 1] = m;
      const int g = j / 2, half = j % 2;
      for (int l = 0; l < 32; ++l) {
        int v = half ? qs[32 * g + l] >> 4 : qs[32 * g + l] & 15;
        if (qh) v |= ((qh[l] >> j) & 1) << 4;
        u[32 * j + l] = v;
      }
    }
  }

  template <int R>
  static void dot(const uint8_t* wrow, const ActView& a, int64_t r, float* out) {
    const int64_t nsb = a.n_in / 256;
    float acc[R] = {}, accm[R] = {};
    int u[256], scale16[16], min16[16];
    for (int64_t s = 0; s < nsb; ++s) {
      float d, dmin;
      unpack(wrow + s * kBytes, u, scale16, min16, d, dmin);
      for (int k = 0; k < R; ++k) {
        const int8_t* q = a.q(r + k) + 256 * s;
        const int16_t* bs = a.bsums(r + k) + 16 * s;
        const float da = a.sc(r + k)[s];
        int sumi = 0, summ = 0;
        for (int g = 0; g < 16; ++g) {
          int t = 0;
          for (int i = 0; i < 16; ++i) t += u[16 * g + i] * q[16 * g + i];
          sumi += scale16[g] * t;
          summ += min16[g] * bs[g];
        }
        if (kLowBit) {  // kernels_lowbit_ymm.h's order, so every path is bit-identical
          acc[k] = std::fma(float(sumi), da * d, acc[k]);
          accm[k] = std::fma(float(summ), da * dmin, accm[k]);
          continue;
        }
        acc[k] += (da * d) * float(sumi) - (da * dmin) * float(summ);
      }
    }
    for (int k = 0; k < R; ++k) out[k] = acc[k] - accm[k];
  }
};

// fp32 activations against F32 / F16 / BF16 weights.
template <GgmlType T>
struct FloatW {
  static float wv(const uint8_t* w, int64_t i) {
    if (T == GgmlType::F32) { float f; std::memcpy(&f, w + 4 * i, 4); return f; }
    if (T == GgmlType::F16) return fp16_to_f32(load_u16(w + 2 * i));
    return bf16_to_f32(load_u16(w + 2 * i));
  }
  template <int R>
  static void dot(const uint8_t* wrow, const ActView& a, int64_t r, float* out) {
    for (int k = 0; k < R; ++k) {
      const float* x = a.xf + (r + k) * a.n_in;
      float acc = 0.f;
      for (int64_t i = 0; i < a.n_in; ++i) acc += wv(wrow, i) * x[i];
      out[k] = acc;
    }
  }
};

}  // namespace

void fill_scalar(KernelTable& t) {
  t.rows[slot(GgmlType::F32)] = &run_rows<FloatW<GgmlType::F32>>;
  t.rows[slot(GgmlType::F16)] = &run_rows<FloatW<GgmlType::F16>>;
  t.rows[slot(GgmlType::BF16)] = &run_rows<FloatW<GgmlType::BF16>>;
  t.rows[slot(GgmlType::Q8_0)] = &run_rows<Simple<GgmlType::Q8_0>>;
  t.rows[slot(GgmlType::Q4_0)] = &run_rows<Simple<GgmlType::Q4_0>>;
  t.rows[slot(GgmlType::Q4_1)] = &run_rows<Simple<GgmlType::Q4_1>>;
  t.rows[slot(GgmlType::Q5_0)] = &run_rows<Simple<GgmlType::Q5_0>>;
  t.rows[slot(GgmlType::Q5_1)] = &run_rows<Simple<GgmlType::Q5_1>>;
  t.rows[slot(GgmlType::Q4_K)] = &run_rows<KQuant<GgmlType::Q4_K>>;
  t.rows[slot(GgmlType::Q5_K)] = &run_rows<KQuant<GgmlType::Q5_K>>;
  t.rows[slot(GgmlType::Q6_K)] = &run_rows<KQuant<GgmlType::Q6_K>>;
  t.rows[slot(GgmlType::Q2_K)] = &run_rows<KQuant<GgmlType::Q2_K>>;
  t.rows[slot(GgmlType::Q3_K)] = &run_rows<KQuant<GgmlType::Q3_K>>;
  t.rows[slot(GgmlType::IQ4_XS)] = &run_rows<KQuant<GgmlType::IQ4_XS>>;
  t.rows[slot(GgmlType::IQ4_NL)] = &run_rows<Simple<GgmlType::IQ4_NL>>;
  t.rows[slot(GgmlType::MXFP4)] = &run_rows<Simple<GgmlType::MXFP4>>;
}

}  // namespace ls::quant
