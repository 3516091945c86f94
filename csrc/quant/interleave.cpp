// Row-interleaved weights (quant.h WeightLayout::Interleaved16; record layout in
// quant_internal.h): the repacking, row dequantization from the repacked form, and the scalar
// reference kernels every SIMD path must match bit for bit.
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "quant/quant_internal.h"

namespace ls {

namespace {

using quant::il_superblock;

bool interleavable_type(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::Q5_1 ||
         t == GgmlType::Q8_0 || t == GgmlType::IQ4_NL || t == GgmlType::MXFP4 || il_superblock(t);
}

// K-quant super-block `sb` of 16 rows (rows[i] = row i's first byte) → one record.
void interleave_k_record(GgmlType t, const uint8_t* const* rows, int64_t sb, uint8_t* rec) {
  const quant::KIlFormat f = quant::kil_format(t);
  const int bb = int(ggml_type_info(t).block_bytes);
  for (int i = 0; i < kInterleaveRows; ++i) {
    const uint8_t* blk = rows[i] + size_t(sb) * size_t(bb);
    if (t == GgmlType::Q2_K || t == GgmlType::Q3_K) {  // Q2_K: scales, qs, d, dmin; Q3_K: hmask, qs, scales, d
      const bool q3 = t == GgmlType::Q3_K;
      std::memcpy(rec + 2 * i, blk + (q3 ? 108 : 80), 2);
      if (!q3) std::memcpy(rec + 32 + 2 * i, blk + 82, 2);
      for (int j = 0; j < 16; ++j)
        rec[f.sc_off + 32 * (j / 2) + 2 * i + (j & 1)] = q3 ? uint8_t(int8_t(quant::q3k_scale(blk + 96, j))) : blk[j];
      for (int st = 0; st < 16; ++st) std::memcpy(rec + f.qs_off + st * 64 + 4 * i, blk + (q3 ? 32 : 16) + 4 * st, 4);
      if (q3)
        for (int st = 0; st < 8; ++st) std::memcpy(rec + f.qh_off + st * 64 + 4 * i, blk + 4 * st, 4);
    } else if (t == GgmlType::IQ4_XS) {  // d, scales_h, scales_l, then 16 code bytes per 32-element sub-block
      std::memcpy(rec + 2 * i, blk, 2);
      for (int j = 0; j < 8; ++j) {
        rec[f.sc_off + 16 * j + i] = uint8_t(int8_t(quant::iq4xs_scale(blk, j)));
        for (int st = 0; st < 4; ++st) std::memcpy(rec + f.qs_off + (4 * j + st) * 64 + 4 * i, blk + 8 + 16 * j + 4 * st, 4);
      }
    } else if (t != GgmlType::Q6_K) {  // Q4_K, Q5_K: d, dmin, 12 scale bytes, [Q5_K: 32 qh bytes], qs
      const int qs = t == GgmlType::Q5_K ? 48 : 16;
      std::memcpy(rec + 2 * i, blk, 2);
      std::memcpy(rec + 32 + 2 * i, blk + 2, 2);
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        quant::k_scale_min(blk + 4, j, sc, m);
        rec[f.sc_off + 16 * j + i] = uint8_t(sc);
        rec[f.m_off + 32 * (j / 2) + 2 * i + (j & 1)] = uint8_t(m);
      }
      for (int g = 0; g < 4; ++g)
        for (int st = 0; st < 8; ++st) std::memcpy(rec + f.qs_off + (8 * g + st) * 64 + 4 * i, blk + qs + 32 * g + 4 * st, 4);
      if (t == GgmlType::Q5_K)
        for (int st = 0; st < 8; ++st) std::memcpy(rec + f.qh_off + st * 64 + 4 * i, blk + 16 + 4 * st, 4);
    } else {
      std::memcpy(rec + 2 * i, blk + 208, 2);
      for (int p = 0; p < 8; ++p) {
        rec[f.sc_off + 32 * p + 2 * i] = blk[192 + 2 * p];
        rec[f.sc_off + 32 * p + 2 * i + 1] = blk[192 + 2 * p + 1];
      }
      for (int h = 0; h < 2; ++h) {
        for (int st = 0; st < 16; ++st) std::memcpy(rec + f.qs_off + (16 * h + st) * 64 + 4 * i, blk + 64 * h + 4 * st, 4);
        for (int st = 0; st < 8; ++st)
          std::memcpy(rec + f.qh_off + (8 * h + st) * 64 + 4 * i, blk + 128 + 32 * h + 4 * st, 4);
      }
    }
  }
}

// Offsets of the fields inside one original ggml block.
struct BlockFields {
  int bytes, m, qh, qs;
};
BlockFields block_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::IQ4_NL: return {18, -1, -1, 2};
    case GgmlType::MXFP4: return {17, -1, -1, 1};
    case GgmlType::Q4_1: return {20, 2, -1, 4};
    case GgmlType::Q5_0: return {22, -1, 2, 6};
    case GgmlType::Q5_1: return {24, 2, 4, 8};
    default: return {34, -1, -1, 2};  // Q8_0
  }
}

}  // namespace

bool interleave_supported(GgmlType t, int64_t n_in, int64_t n_out) {
  const int64_t be = il_superblock(t) ? 256 : 32;
  return interleavable_type(t) && n_in > 0 && n_in % be == 0 && n_out > 0 && n_out % kInterleaveRows == 0;
}

size_t interleaved_bytes(GgmlType t, int64_t n_in, int64_t n_out) {
  const int64_t be = il_superblock(t) ? 256 : 32;
  return size_t(n_out / kInterleaveRows) * size_t(n_in / be) * size_t(quant::il_record_bytes(t));
}

void interleave_weights(GgmlType t, const void* src, int64_t n_in, int64_t n_out, void* dst) {
  if (!interleave_supported(t, n_in, n_out)) throw std::invalid_argument("interleave_weights: unsupported shape or type");
  if (il_superblock(t)) {
    const size_t row_bytes = ggml_row_bytes(t, n_in), rec_bytes = size_t(quant::il_record_bytes(t));
    const int64_t nsb = n_in / 256;
    for (int64_t g = 0; g < n_out / kInterleaveRows; ++g) {
      const uint8_t* rows[kInterleaveRows];
      for (int i = 0; i < kInterleaveRows; ++i)
        rows[i] = static_cast<const uint8_t*>(src) + size_t(g * kInterleaveRows + i) * row_bytes;
      for (int64_t sb = 0; sb < nsb; ++sb)
        interleave_k_record(t, rows, sb, static_cast<uint8_t*>(dst) + size_t(g * nsb + sb) * rec_bytes);
    }
    return;
  }
  const quant::IlFormat f = quant::il_format(t);
  const BlockFields bf = block_fields(t);
  const int64_t nb = n_in / 32;
  const size_t row_bytes = ggml_row_bytes(t, n_in);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  const int n_steps = f.q8 ? 8 : 4;
  for (int64_t g = 0; g < n_out / kInterleaveRows; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = d + size_t(g * nb + b) * size_t(f.rec_bytes);
      std::memset(rec, 0, size_t(f.rec_bytes));
      uint64_t masks[8] = {};
      for (int i = 0; i < kInterleaveRows; ++i) {
        const uint8_t* blk = s + size_t(g * kInterleaveRows + i) * row_bytes + size_t(b) * size_t(bf.bytes);
        if (f.mx) rec[i] = blk[0];
        else std::memcpy(rec + 2 * i, blk, 2);
        if (f.min) std::memcpy(rec + f.m_off + 2 * i, blk + bf.m, 2);
        for (int j = 0; j < n_steps; ++j) std::memcpy(rec + f.qs_off + 64 * j + 4 * i, blk + bf.qs + 4 * j, 4);
        if (f.q5) {
          const uint32_t qh = quant::load_u32(blk + bf.qh);
          for (int j = 0; j < 8; ++j)
            for (int k = 0; k < 4; ++k)
              if ((qh >> (4 * j + k)) & 1u) masks[j] |= uint64_t(1) << (4 * i + k);
        }
      }
      if (f.q5) std::memcpy(rec + f.h_off, masks, sizeof(masks));
    }
  }
}

namespace quant {
namespace {

// Code of element e (0..31) of row i in a record, as the signed weight value minus nothing:
// Q8_0 the int8; IQ4_NL / MXFP4 its table value; Q4/Q5 the unsigned code (bias 8/16 handled by the caller).
inline int il_code(const IlFormat& f, const uint8_t* rec, int i, int e) {
  if (f.q8) return int(int8_t(rec[f.qs_off + 64 * (e >> 2) + 4 * i + (e & 3)]));
  const int j = (e & 15) >> 2;
  const uint8_t byte = rec[f.qs_off + 64 * j + 4 * i + (e & 3)];
  int u = e < 16 ? (byte & 15) : (byte >> 4);
  if (f.iq4) return f.mx ? kMxfp4Values[u] : kIq4Values[u];
  if (f.q5) {
    uint64_t m;
    std::memcpy(&m, rec + f.h_off + 8 * (e >> 2), 8);
    u |= int((m >> (4 * i + (e & 3))) & 1u) << 4;
  }
  return u;
}

inline int il_offset(GgmlType t) { return t == GgmlType::Q4_0 ? 8 : (t == GgmlType::Q5_0 ? 16 : 0); }

template <GgmlType T>
void il_rows_scalar(const uint8_t* w, size_t w_stride, int64_t o0, int64_t o1, const ActView& a, float* y,
                    int64_t y_stride) {
  constexpr IlFormat f = il_format(T);
  const ActOrder order = act_format(T).order;
  const int off = il_offset(T);
  const int64_t nb = a.n_in / 32;
  const size_t group_bytes = w_stride * kInterleaveRows;
  for (int64_t g = o0 / kInterleaveRows; g < o1 / kInterleaveRows; ++g) {
    const uint8_t* gp = w + size_t(g) * group_bytes;
    for (int64_t r = 0; r < a.n_rows; ++r) {
      float acc[kInterleaveRows] = {};
      const int8_t* q = a.q(r);
      const float* sc = a.sc(r);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* rec = gp + size_t(b) * size_t(f.rec_bytes);
        for (int i = 0; i < kInterleaveRows; ++i) {
          int32_t dot = 0;
          for (int e = 0; e < 32; ++e) dot += (il_code(f, rec, i, e) - off) * int32_t(q[act_index(order, b, e)]);
          const float s = il_scale(f, rec, i) * sc[2 * b];
          acc[i] = std::fma(float(dot), s, acc[i]);
          if (f.min) acc[i] = std::fma(fp16_to_f32(load_u16(rec + f.m_off + 2 * i)), sc[2 * b + 1], acc[i]);
        }
      }
      for (int i = 0; i < kInterleaveRows; ++i) y[r * y_stride + g * kInterleaveRows + i] = acc[i];
    }
  }
}

// Code of element e (0..255) of row i in a K-quant record (Q4_K nibble, Q5_K 5 bits, Q6_K 6-bit
// unsigned, IQ4_XS its table value).
inline int kil_code(GgmlType t, const uint8_t* rec, int i, int e) {
  const KIlFormat f = kil_format(t);
  if (t == GgmlType::Q2_K || t == GgmlType::Q3_K) {  // Q3_K: the signed code (−4 unless its hmask bit is set)
    const int h = e >> 7, k = (e >> 5) & 3, t8 = (e & 31) >> 2;
    const int u = (rec[f.qs_off + (8 * h + t8) * 64 + 4 * i + (e & 3)] >> (2 * k)) & 3;
    if (t == GgmlType::Q2_K) return u;
    return ((rec[f.qh_off + t8 * 64 + 4 * i + (e & 3)] >> (4 * h + k)) & 1) ? u : u - 4;
  }
  if (t == GgmlType::IQ4_XS) {
    const int w = e % 32;
    const uint8_t byte = rec[f.qs_off + (4 * (e / 32) + (w % 16) / 4) * 64 + 4 * i + (e & 3)];
    return kIq4Values[w < 16 ? byte & 15 : byte >> 4];
  }
  if (t != GgmlType::Q6_K) {
    const int g = e / 64, half = (e % 64) / 32, st = (e % 32) / 4;
    const uint8_t byte = rec[f.qs_off + (8 * g + st) * 64 + 4 * i + (e & 3)];
    const int lo = half ? byte >> 4 : byte & 15;
    if (t == GgmlType::Q4_K) return lo;
    return lo | ((rec[f.qh_off + st * 64 + 4 * i + (e & 3)] >> (e / 32)) & 1) << 4;  // bit j of qh[e % 32]
  }
  const int h = e / 128, E = (e % 128) / 4;
  const uint8_t lb = rec[f.qs_off + (16 * h + (E < 16 ? E : E - 16)) * 64 + 4 * i + (e & 3)];
  const uint8_t hb = rec[f.qh_off + (8 * h + (E & 7)) * 64 + 4 * i + (e & 3)];
  return (E < 16 ? lb & 15 : lb >> 4) | ((hb >> (2 * (E >> 3))) & 3) << 4;
}
// Types whose sub-blocks have 16 elements (16 per super-block; the others 32, 8 per super-block).
constexpr bool kil_sub16(GgmlType t) { return t == GgmlType::Q6_K || t == GgmlType::Q2_K || t == GgmlType::Q3_K; }
// Scale of sub-block j of row i.
inline int kil_scale(GgmlType t, const uint8_t* rec, int i, int j) {
  const KIlFormat f = kil_format(t);
  if (t == GgmlType::IQ4_XS) return int(int8_t(rec[f.sc_off + 16 * j + i]));
  if (!kil_sub16(t)) return rec[f.sc_off + 16 * j + i];
  const uint8_t b = rec[f.sc_off + 32 * (j / 2) + 2 * i + (j & 1)];  // pairs [j/2][row]
  return t == GgmlType::Q2_K ? b & 15 : int(int8_t(b));
}
// Min of sub-block j of row i (Q4_K / Q5_K: 32 elements; Q2_K: 16, the high nibble of its scale byte).
inline int kil_min(GgmlType t, const uint8_t* rec, int i, int j) {
  const uint8_t b = rec[kil_format(t).m_off + 32 * (j / 2) + 2 * i + (j & 1)];
  return t == GgmlType::Q2_K ? b >> 4 : b;
}

template <GgmlType T>
void kil_rows_scalar(const uint8_t* w, size_t, int64_t o0, int64_t o1, const ActView& a, float* y, int64_t y_stride) {
  constexpr KIlFormat f = kil_format(T);
  constexpr bool kMin = T == GgmlType::Q4_K || T == GgmlType::Q5_K || T == GgmlType::Q2_K;
  constexpr int sub = kil_sub16(T) ? 16 : 32;
  const int64_t nsb = a.n_in / 256;
  for (int64_t g = o0 / kInterleaveRows; g < o1 / kInterleaveRows; ++g) {
    const uint8_t* gp = w + size_t(g * nsb) * size_t(f.rec_bytes);
    for (int64_t r = 0; r < a.n_rows; ++r) {
      // Q4_K / Q5_K / Q2_K min terms apart (Q2_K and Q3_K: the order of their row kernels, so the layouts agree).
      float acc[kInterleaveRows] = {}, acc_min[kInterleaveRows] = {};
      for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* rec = gp + size_t(s) * size_t(f.rec_bytes);
        const int8_t* q = a.q(r) + 256 * s;
        const int16_t* bs = a.bsums(r) + 16 * s;
        const float da = a.sc(r)[s];
        for (int i = 0; i < kInterleaveRows; ++i) {
          int32_t sumi = 0, summ = 0;
          for (int j = 0; j < 256 / sub; ++j) {
            int32_t dot = 0;
            for (int e = sub * j; e < sub * (j + 1); ++e) dot += kil_code(T, rec, i, e) * int32_t(q[e]);
            sumi += kil_scale(T, rec, i, j) * dot;
            if (T == GgmlType::Q2_K) summ += kil_min(T, rec, i, j) * bs[j];
            else if (kMin) summ += kil_min(T, rec, i, j) * (bs[2 * j] + bs[2 * j + 1]);
            else if (T == GgmlType::Q6_K) sumi -= 32 * kil_scale(T, rec, i, j) * bs[j];
          }
          acc[i] = std::fma(float(sumi), fp16_to_f32(load_u16(rec + 2 * i)) * da, acc[i]);
          if (kMin) acc_min[i] = std::fma(float(summ), fp16_to_f32(load_u16(rec + 32 + 2 * i)) * da, acc_min[i]);
        }
      }
      for (int i = 0; i < kInterleaveRows; ++i) y[r * y_stride + g * kInterleaveRows + i] = acc[i] - acc_min[i];
    }
  }
}

}  // namespace

void fill_il_scalar(KernelTable& t) {
  t.il_rows[slot(GgmlType::Q4_K)] = &kil_rows_scalar<GgmlType::Q4_K>;
  t.il_rows[slot(GgmlType::Q5_K)] = &kil_rows_scalar<GgmlType::Q5_K>;
  t.il_rows[slot(GgmlType::Q6_K)] = &kil_rows_scalar<GgmlType::Q6_K>;
  t.il_rows[slot(GgmlType::IQ4_XS)] = &kil_rows_scalar<GgmlType::IQ4_XS>;
  t.il_rows[slot(GgmlType::Q2_K)] = &kil_rows_scalar<GgmlType::Q2_K>;
  t.il_rows[slot(GgmlType::Q3_K)] = &kil_rows_scalar<GgmlType::Q3_K>;
  t.il_rows[slot(GgmlType::IQ4_NL)] = &il_rows_scalar<GgmlType::IQ4_NL>;
  t.il_rows[slot(GgmlType::MXFP4)] = &il_rows_scalar<GgmlType::MXFP4>;
  t.il_rows[slot(GgmlType::Q4_0)] = &il_rows_scalar<GgmlType::Q4_0>;
  t.il_rows[slot(GgmlType::Q4_1)] = &il_rows_scalar<GgmlType::Q4_1>;
  t.il_rows[slot(GgmlType::Q5_0)] = &il_rows_scalar<GgmlType::Q5_0>;
  t.il_rows[slot(GgmlType::Q5_1)] = &il_rows_scalar<GgmlType::Q5_1>;
  t.il_rows[slot(GgmlType::Q8_0)] = &il_rows_scalar<GgmlType::Q8_0>;
}

}  // namespace quant

void dequantize_weight_row(GgmlType t, WeightLayout layout, const void* w, int64_t n_in, int64_t row, float* dst) {
  const auto* base = static_cast<const uint8_t*>(w);
  if (layout == WeightLayout::Rows) {
    dequantize_row(t, base + size_t(row) * ggml_row_bytes(t, n_in), dst, n_in);
    return;
  }
  const int64_t g = row / kInterleaveRows;
  const int i = int(row % kInterleaveRows);
  if (quant::il_superblock(t)) {
    const int64_t nsb = n_in / 256;
    const int rec_bytes = quant::il_record_bytes(t);
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* rec = base + size_t(g * nsb + s) * size_t(rec_bytes);
      const float d = quant::fp16_to_f32(quant::load_u16(rec + 2 * i));
      float* y = dst + 256 * s;
      // Same expressions as dequantize_row: bit-identical.
      if (t == GgmlType::Q2_K) {
        const float dmin = quant::fp16_to_f32(quant::load_u16(rec + 32 + 2 * i));
        for (int e = 0; e < 256; ++e) {
          const float dl = d * float(quant::kil_scale(t, rec, i, e / 16)), ml = dmin * float(quant::kil_min(t, rec, i, e / 16));
          y[e] = dl * float(quant::kil_code(t, rec, i, e)) - ml;
        }
      } else if (t == GgmlType::Q3_K) {
        for (int e = 0; e < 256; ++e) y[e] = (d * float(quant::kil_scale(t, rec, i, e / 16))) * float(quant::kil_code(t, rec, i, e));
      } else if (t == GgmlType::IQ4_XS) {
        for (int j = 0; j < 8; ++j) {
          const float dl = d * float(quant::kil_scale(t, rec, i, j));
          for (int e = 32 * j; e < 32 * j + 32; ++e) y[e] = dl * float(quant::kil_code(t, rec, i, e));
        }
      } else if (t != GgmlType::Q6_K) {
        const float dmin = quant::fp16_to_f32(quant::load_u16(rec + 32 + 2 * i));
        for (int j = 0; j < 8; ++j) {
          const float ds = d * float(quant::kil_scale(t, rec, i, j)), dm = dmin * float(quant::kil_min(t, rec, i, j));
          for (int e = 32 * j; e < 32 * j + 32; ++e) y[e] = ds * float(quant::kil_code(t, rec, i, e)) - dm;
        }
      } else {
        for (int e = 0; e < 256; ++e)
          y[e] = (d * float(quant::kil_scale(t, rec, i, e / 16))) * float(quant::kil_code(t, rec, i, e) - 32);
      }
    }
    return;
  }
  const quant::IlFormat f = quant::il_format(t);
  const int64_t nb = n_in / 32;
  const int off = quant::il_offset(t);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = base + size_t(g * nb + b) * size_t(f.rec_bytes);
    const float d = quant::il_scale(f, rec, i);
    const float m = f.min ? quant::fp16_to_f32(quant::load_u16(rec + f.m_off + 2 * i)) : 0.f;
    // Same expressions as dequantize_row (d·code + m, or d·(code − offset)): bit-identical.
    for (int e = 0; e < 32; ++e) {
      const int c = quant::il_code(f, rec, i, e);
      dst[32 * b + e] = f.min ? d * float(c) + m : d * float(c - off);
    }
  }
}

}  // namespace ls
