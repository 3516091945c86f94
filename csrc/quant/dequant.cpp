// Scalar dequantization (embedding lookups, tests). Float operations mirror the gguf
// package's numpy code operation by operation (e.g. Q4_1 = d*q + m, Q4_K = (d*sc)*q - dmin*m)
// so results are bit-identical to gguf.quants.dequantize.
#include <stdexcept>
#include <string>

#include "quant/quant_internal.h"

namespace ls {
using namespace quant;

namespace {

void deq_q4_0(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(int(b[2 + j] & 15) - 8);
    y[j + 16] = d * float(int(b[2 + j] >> 4) - 8);
  }
}
void deq_q4_1(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b)), m = fp16_to_f32(load_u16(b + 2));
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(b[4 + j] & 15) + m;
    y[j + 16] = d * float(b[4 + j] >> 4) + m;
  }
}
void deq_q5_0(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  const uint32_t qh = load_u32(b + 2);
  for (int j = 0; j < 16; ++j) {
    const int u0 = (b[6 + j] & 15) | int((qh >> j) & 1) << 4;
    const int u1 = (b[6 + j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
    y[j] = d * float(u0 - 16);
    y[j + 16] = d * float(u1 - 16);
  }
}
void deq_q5_1(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b)), m = fp16_to_f32(load_u16(b + 2));
  const uint32_t qh = load_u32(b + 4);
  for (int j = 0; j < 16; ++j) {
    const int u0 = (b[8 + j] & 15) | int((qh >> j) & 1) << 4;
    const int u1 = (b[8 + j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
    y[j] = d * float(u0) + m;
    y[j + 16] = d * float(u1) + m;
  }
}
void deq_q8_0(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  for (int j = 0; j < 32; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}
// Q4_K / Q5_K share the scale decoding; qh == nullptr for Q4_K.
void deq_k45(const uint8_t* b, const uint8_t* scales, const uint8_t* qh, const uint8_t* qs, float* y) {
  const float d = fp16_to_f32(load_u16(b)), dmin = fp16_to_f32(load_u16(b + 2));
  for (int g = 0; g < 4; ++g) {
    for (int half = 0; half < 2; ++half) {
      const int j = 2 * g + half;
      int sc, m;
      k_scale_min(scales, j, sc, m);
      const float ds = d * float(sc), dm = dmin * float(m);
      for (int l = 0; l < 32; ++l) {
        int u = half ? qs[32 * g + l] >> 4 : qs[32 * g + l] & 15;
        if (qh) u |= ((qh[l] >> j) & 1) << 4;
        y[64 * g + 32 * half + l] = ds * float(u) - dm;
      }
    }
  }
}
void deq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = fp16_to_f32(load_u16(b + 208));
  for (int h = 0; h < 2; ++h) {
    const uint8_t* L = ql + 64 * h;
    const uint8_t* H = qh + 32 * h;
    float* yh = y + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int u[4] = {(L[l] & 15) | ((H[l] >> 0) & 3) << 4, (L[l + 32] & 15) | ((H[l] >> 2) & 3) << 4,
                        (L[l] >> 4) | ((H[l] >> 4) & 3) << 4, (L[l + 32] >> 4) | ((H[l] >> 6) & 3) << 4};
      for (int k = 0; k < 4; ++k) {
        const int e = 32 * k + l;  // element within the half
        yh[e] = (d * float(sc[8 * h + e / 16])) * float(u[k] - 32);
      }
    }
  }
}

// Q2_K: 16 bytes scales (low nibble scale, high nibble min), 64 bytes of 2-bit codes, fp16 d, dmin.
// Element e = 128h + 32k + l is bits 2k of qs[32h + l], in sub-block e/16.
void deq_q2_k(const uint8_t* b, float* y) {
  const uint8_t* sc = b;
  const uint8_t* qs = b + 16;
  const float d = fp16_to_f32(load_u16(b + 80)), dmin = fp16_to_f32(load_u16(b + 82));
  for (int e = 0; e < 256; ++e) {
    const int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
    const int u = (qs[32 * h + l] >> (2 * k)) & 3;
    const float dl = d * float(sc[e / 16] & 15), ml = dmin * float(sc[e / 16] >> 4);
    y[e] = dl * float(u) - ml;
  }
}
// Q3_K: 32 bytes hmask, 64 bytes 2-bit codes (as Q2_K), 12 bytes scales, fp16 d. The code is
// low2 − 4 unless bit e/32 of hmask[e % 32] is set.
void deq_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* qs = b + 32;
  const float d = fp16_to_f32(load_u16(b + 108));
  for (int e = 0; e < 256; ++e) {
    const int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
    const int q = ((qs[32 * h + l] >> (2 * k)) & 3) - (((hm[l] >> (e >> 5)) & 1) ? 0 : 4);
    y[e] = (d * float(q3k_scale(b + 96, e / 16))) * float(q);
  }
}
void deq_iq4_nl(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(kIq4Values[b[2 + j] & 15]);
    y[j + 16] = d * float(kIq4Values[b[2 + j] >> 4]);
  }
}
// MXFP4: an E8M0 byte, then IQ4_NL-style nibbles indexing kMxfp4Values (ggml's dequantize_row_mxfp4).
void deq_mxfp4(const uint8_t* b, float* y) {
  const float d = e8m0_half_to_f32(b[0]);
  for (int j = 0; j < 16; ++j) {
    y[j] = float(kMxfp4Values[b[1 + j] & 15]) * d;
    y[j + 16] = float(kMxfp4Values[b[1 + j] >> 4]) * d;
  }
}
// IQ4_XS: fp16 d, u16 scales_h, 4 bytes scales_l, then per 32-element sub-block 16 bytes of
// IQ4_NL-style nibbles.
void deq_iq4_xs(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  for (int ib = 0; ib < 8; ++ib) {
    const float dl = d * float(iq4xs_scale(b, ib));
    const uint8_t* qs = b + 8 + 16 * ib;
    for (int j = 0; j < 16; ++j) {
      y[32 * ib + j] = dl * float(kIq4Values[qs[j] & 15]);
      y[32 * ib + j + 16] = dl * float(kIq4Values[qs[j] >> 4]);
    }
  }
}

}  // namespace

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  const GgmlTypeInfo& info = ggml_type_info(t);
  if (!ggml_type_supported(t) || n < 0 || n % info.block_elems != 0)
    throw std::invalid_argument(std::string("dequantize_row: unsupported type or length for ") + info.name);
  const int64_t nb = n / info.block_elems;
  const int bs = info.block_bytes;
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, p, size_t(n) * 4); return;
    case GgmlType::F16: for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(load_u16(p + 2 * i)); return;
    case GgmlType::BF16: for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(p + 2 * i)); return;
    case GgmlType::Q4_0: for (int64_t b = 0; b < nb; ++b) deq_q4_0(p + b * bs, dst + 32 * b); return;
    case GgmlType::Q4_1: for (int64_t b = 0; b < nb; ++b) deq_q4_1(p + b * bs, dst + 32 * b); return;
    case GgmlType::Q5_0: for (int64_t b = 0; b < nb; ++b) deq_q5_0(p + b * bs, dst + 32 * b); return;
    case GgmlType::Q5_1: for (int64_t b = 0; b < nb; ++b) deq_q5_1(p + b * bs, dst + 32 * b); return;
    case GgmlType::Q8_0: for (int64_t b = 0; b < nb; ++b) deq_q8_0(p + b * bs, dst + 32 * b); return;
    case GgmlType::Q4_K:
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = p + b * bs;
        deq_k45(blk, blk + 4, nullptr, blk + 16, dst + 256 * b);
      }
      return;
    case GgmlType::Q5_K:
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = p + b * bs;
        deq_k45(blk, blk + 4, blk + 16, blk + 48, dst + 256 * b);
      }
      return;
    case GgmlType::Q6_K: for (int64_t b = 0; b < nb; ++b) deq_q6_k(p + b * bs, dst + 256 * b); return;
    case GgmlType::Q2_K: for (int64_t b = 0; b < nb; ++b) deq_q2_k(p + b * bs, dst + 256 * b); return;
    case GgmlType::Q3_K: for (int64_t b = 0; b < nb; ++b) deq_q3_k(p + b * bs, dst + 256 * b); return;
    case GgmlType::IQ4_NL: for (int64_t b = 0; b < nb; ++b) deq_iq4_nl(p + b * bs, dst + 32 * b); return;
    case GgmlType::MXFP4: for (int64_t b = 0; b < nb; ++b) deq_mxfp4(p + b * bs, dst + 32 * b); return;
    case GgmlType::IQ4_XS: for (int64_t b = 0; b < nb; ++b) deq_iq4_xs(p + b * bs, dst + 256 * b); return;
    default: break;
  }
}

}  // namespace ls
