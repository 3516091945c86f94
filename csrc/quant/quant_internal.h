// Internals shared by the quant kernel files: fp16 helpers, the activation scratch layout,
// and the per-ISA kernel table. Not part of the public contract (quant.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/fp16.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

namespace ls::quant {

// ---- scalar fp16 (common/fp16.h) / bf16 ----
using ls::f32_to_fp16;
using ls::fp16_round;
using ls::fp16_to_f32;

inline float bf16_to_f32(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t load_u16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
inline uint32_t load_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }

// Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 scale bytes s.
inline void k_scale_min(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// IQ4_NL / IQ4_XS: the 16 non-linear code values (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};
// MXFP4: the 16 code values (ggml's kvalues_mxfp4, twice the E2M1 values) and the block's E8M0 scale
// halved to match (ggml's GGML_E8M0_TO_FP32_HALF: 2^(e-128), a denormal for e < 2).
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
inline float e8m0_half_to_f32(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// The code table of a 4-bit table type (IQ4_NL / IQ4_XS / MXFP4).
constexpr const int8_t* nl_table(GgmlType t) { return t == GgmlType::MXFP4 ? kMxfp4Values : kIq4Values; }

// Q3_K: signed scale of 16-element sub-block i (0..15) from the 12 packed bytes s (low 4 bits
// in s[0..7] by nibble, high 2 bits in s[8..11] by bit pair), minus 32.
inline int q3k_scale(const uint8_t* s, int i) {
  const int lo = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
  const int hi = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
  return (lo | hi << 4) - 32;
}
// IQ4_XS: signed scale of 32-element sub-block ib (0..7) of block b (low 4 bits in
// scales_l = b[4..7] by nibble, high 2 bits in the u16 scales_h = b[2..3]), minus 32.
inline int iq4xs_scale(const uint8_t* b, int ib) {
  const int lo = (b[4 + ib / 2] >> (4 * (ib & 1))) & 15;
  const int hi = (load_u16(b + 2) >> (2 * ib)) & 3;
  return (lo | hi << 4) - 32;
}

// ---- activation scratch ----
// Each activation row is quantized into one scratch "act row" of act_row_bytes bytes
// (64-byte aligned sections, rows consecutive):
//   Q8_0 / Q8_1 (32-element blocks, nb blocks padded to nbp = even):
//     [0, nbp*32)            int8 q, in `order` (see below); pad blocks are 0
//     [sc_off, +nbp*8)       float pairs per block: {d, s} with d = fp16(amax/127) and
//                            s = fp16(d*Σq) (Q8_1; 0 for Q8_0), both widened to float
//     [bias_off, +nbp/2*64)  only if bias_k != 0: per block pair 16 int32 with -bias_k*Σq
//                            of the pair's first block at lane 0 and of the second block at
//                            lane 8 (Natural) or lane 4 (PairPerm); other lanes 0. SIMD
//                            kernels that run unsigned weights u = w + bias_k load it as the
//                            initial integer accumulator.
//   Q8_K (256-element super-blocks, nsb of them):
//     [0, n) int8 q natural; [sc_off, +nsb*4) float d; [bias_off, +nsb*32) int16 bsums[16]
//   fp32 activation types: no scratch, kernels read x directly.
// Orders: Natural = element i of block b at b*32+i. PairPerm (Q4_0/Q4_1/Q5_0/Q5_1 weights,
// whose bytes hold elements j and j+16) = per pair of blocks 64 bytes
// [blk0 0..15 | blk1 0..15 | blk0 16..31 | blk1 16..31], so the low nibbles of two weight
// blocks side by side, then their high nibbles, line up with the activations without shuffles.
enum class ActKind : uint8_t { F32, Q8_0, Q8_1, Q8_K };
enum class ActOrder : uint8_t { Natural, PairPerm };

struct ActFormat {
  ActKind kind;
  ActOrder order;
  int bias_k;
};
ActFormat act_format(GgmlType wt);

inline int64_t act_index(ActOrder o, int64_t b, int i) {
  return o == ActOrder::Natural ? b * 32 + i : (b >> 1) * 64 + (i >> 4) * 32 + (b & 1) * 16 + (i & 15);
}

struct ActLayout {
  size_t sc_off = 0, bias_off = 0, row_bytes = 0;
};
ActLayout act_layout(GgmlType wt, int64_t n_in);

// What a kernel sees of the quantized activations (rows r = 0..n_rows-1).
struct ActView {
  const uint8_t* base = nullptr;  // quantized rows (scratch), or nullptr for fp32 kinds
  size_t row_bytes = 0;
  size_t sc_off = 0, bias_off = 0;
  const float* xf = nullptr;      // fp32 activations (row stride n_in) for F32/F16/BF16
  int64_t n_in = 0;
  int64_t n_rows = 0;

  const int8_t* q(int64_t r) const { return reinterpret_cast<const int8_t*>(base + r * row_bytes); }
  const float* sc(int64_t r) const { return reinterpret_cast<const float*>(base + r * row_bytes + sc_off); }
  const uint8_t* bias(int64_t r) const { return base + r * row_bytes + bias_off; }
  const int16_t* bsums(int64_t r) const { return reinterpret_cast<const int16_t*>(base + r * row_bytes + bias_off); }
};

// Quantize activation rows [r0, r1) of x (row stride n_in) into the scratch rows at dst.
void quantize_act_rows(GgmlType wt, const float* x, int64_t n_in, int64_t r0, int64_t r1, uint8_t* dst,
                       const ActLayout& lay);

// Computes y[r*y_stride + o] for all activation rows r and output rows o in [o0, o1).
// w points at weight row 0; w_stride = bytes per weight row.
using RowsFn = void (*)(const uint8_t* w, size_t w_stride, int64_t o0, int64_t o1, const ActView& a, float* y,
                        int64_t y_stride);

// Activation quantizer (same signature as quantize_act_rows). SIMD versions must produce
// bit-identical scratch (all steps are exact or correctly rounded IEEE operations).
using QuantFn = void (*)(GgmlType wt, const float* x, int64_t n_in, int64_t r0, int64_t r1, uint8_t* dst,
                         const ActLayout& lay);

// ---- row-interleaved records (quant.h: WeightLayout::Interleaved16) ----
// One record = one 32-element block of 16 rows, in this order:
//   [0, 32)    fp16 d of rows 0..15
//   [m_off)    fp16 m of rows 0..15 (Q4_1, Q5_1)
//   [h_off)    Q5_0/Q5_1: 8 × u64 masks; mask j bit 4i+t = fifth bit of element 4j+t of row i
//   [qs_off)   codes, 64 bytes per j: bytes 4i..4i+3 = row i's 4 code bytes of step j.
//              Q4/Q5 (4 steps): row bytes qs[4j..4j+3]; low nibbles are elements 4j..4j+3,
//              high nibbles elements 16+4j..16+4j+3 (step 4+j). Q8_0 (8 steps): int8 q[4j..4j+3].
//              IQ4_NL: Q4_0's record; a nibble indexes kIq4Values instead of meaning nibble − 8.
//              MXFP4: [0, 16) the E8M0 byte of rows 0..15 instead of fp16 d, codes from 16 (16 × 17 bytes,
//              the original size); a nibble indexes kMxfp4Values.
// So "step j" (j = 0..7) always pairs with activation elements 4j..4j+3 of the block.
struct IlFormat {
  int rec_bytes = 0, m_off = 0, h_off = 0, qs_off = 0;
  bool min = false, q5 = false, q8 = false, iq4 = false, mx = false;  // iq4: codes index a table (nl_table)
};
constexpr IlFormat il_format(GgmlType t) {
  IlFormat f;
  f.mx = t == GgmlType::MXFP4;
  f.iq4 = t == GgmlType::IQ4_NL || f.mx;
  f.min = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
  f.q5 = t == GgmlType::Q5_0 || t == GgmlType::Q5_1;
  f.q8 = t == GgmlType::Q8_0;
  f.m_off = 32;
  f.h_off = f.min ? 64 : 32;
  f.qs_off = f.h_off + (f.q5 ? 64 : 0);
  if (f.mx) f.qs_off = 16;
  f.rec_bytes = f.qs_off + (f.q8 ? 512 : 256);
  return f;
}
// The weight scale of row i of a 32-block record.
inline float il_scale(const IlFormat& f, const uint8_t* rec, int i) {
  return f.mx ? e8m0_half_to_f32(rec[i]) : fp16_to_f32(load_u16(rec + 2 * i));
}
// K-quant records: one 256-element super-block of 16 rows ("step" = 4 consecutive elements).
//   Q4_K: [0,32) fp16 d; [32,64) fp16 dmin; [64,192) 6-bit scales as bytes [sub j][row];
//         [192,320) mins as byte pairs [j/2][row]{m_2j', m_2j'+1}; [320,2368) codes [chunk g]
//         [step t 0..7][row] 4 bytes = the row's qs[32g+4t..+3] (low nibbles: elements 64g+4t..,
//         high: 64g+32+4t..).
//   Q6_K: [0,32) fp16 d; [32,288) int8 scales as pairs [s/2][row]{sc_2p, sc_2p+1}; [288,2336) ql
//         [half][step 0..15][row] 4 bytes = ql[64h+4t..]; [2336,3360) qh [half][step 0..7][row].
//         Element step E (0..31) of half h: low 4 bits from ql step E (E < 16, low nibble) or
//         E-16 (high nibble), high 2 bits = (qh step E&7 >> 2·(E>>3)) & 3.
//   IQ4_XS: [0,32) fp16 d; [32,160) signed scales (6-bit value − 32) as int8 [sub j][row]; [160,2208)
//         codes [sub j][step t 0..3][row] 4 bytes = the row's qs[16j+4t..+3] (low nibbles: elements
//         32j+4t.., high: 32j+16+4t..), each nibble an index into kIq4Values.
//   Q2_K / Q3_K (16-element sub-blocks i = 0..15; element 128h+32k+l of a row is bit pair k of its qs[32h+l]):
//   Q2_K: [0,32) fp16 d; [32,64) fp16 dmin; [64,320) the row's own scale bytes (low nibble scale, high nibble
//         min) as pairs [i/2][row]{b_2p, b_2p+1}; [320,1344) codes [h 0..1][line t 0..7][row] 4 bytes = the row's
//         qs[32h+4t..+3] (bit pair k: elements 128h+32k+4t..+3, sub-block 8h+2k+t/4). 16 × 84 bytes: no overhead.
//   Q3_K: [0,32) fp16 d; [32,288) signed scales (6-bit value − 32) as int8 pairs [i/2][row]{sc_2p, sc_2p+1};
//         [288,800) hmask [line t 0..7][row] 4 bytes = hmask[4t..+3] (bit 4h+k set: element 128h+32k+4t.. has
//         no −4); [800,1824) codes as Q2_K's. 16 × 110 + 64 bytes (+3.6%: 16 scale bytes per row, not 12).
struct KIlFormat {
  int rec_bytes, sc_off, m_off, qs_off, qh_off;
};
constexpr KIlFormat kil_format(GgmlType t) {
  // Q5_K = Q4_K's record + its high bits: 8 lines of 16 rows × 4 qh bytes (line t: qh[4t..4t+3]).
  return t == GgmlType::Q4_K     ? KIlFormat{2368, 64, 192, 320, 0}
         : t == GgmlType::Q5_K   ? KIlFormat{2880, 64, 192, 320, 2368}
         : t == GgmlType::IQ4_XS ? KIlFormat{2208, 32, 0, 160, 0}
         : t == GgmlType::Q2_K   ? KIlFormat{1344, 64, 64, 320, 0}
         : t == GgmlType::Q3_K   ? KIlFormat{1824, 32, 0, 800, 288}
                                 : KIlFormat{3360, 32, 0, 288, 2336};
}
// Types whose interleaved record covers a 256-element super-block (the others: a 32-block).
constexpr bool il_superblock(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::IQ4_XS ||
         t == GgmlType::Q2_K || t == GgmlType::Q3_K;
}
// Bytes of one 16-row group record (simple types: per 32-block; K-quants: per super-block).
inline int il_record_bytes(GgmlType t) { return il_superblock(t) ? kil_format(t).rec_bytes : il_format(t).rec_bytes; }

// Activation bytes 4j..4j+3 of block b (any act order keeps 4-element groups contiguous).
inline int64_t act_step_index(ActOrder o, int64_t b, int j) { return act_index(o, b, 4 * j); }
// The int32 initial accumulator (-bias_k·Σq) of block b stored in an activation row's bias area.
inline int32_t act_bias_of(const ActView& a, int64_t r, ActOrder o, int64_t b) {
  const int lane = (b & 1) ? (o == ActOrder::Natural ? 8 : 4) : 0;
  int32_t v;
  std::memcpy(&v, a.bias(r) + ((b >> 1) * 16 + lane) * 4, 4);
  return v;
}

constexpr int kNumTypeSlots = 40;  // indexed by GgmlType id
struct KernelTable {
  RowsFn rows[kNumTypeSlots] = {};
  // Kernels over Interleaved16 weights: o0, o1 multiples of 16; w_stride = original row bytes.
  RowsFn il_rows[kNumTypeSlots] = {};
  QuantFn quantize = &quantize_act_rows;
};
inline int slot(GgmlType t) { return int(t) < kNumTypeSlots ? int(t) : 0; }

// Filled by each ISA file; entries left null fall back to the next lower path.
void fill_scalar(KernelTable& t);
void fill_avx2(KernelTable& t);
void fill_avx_vnni(KernelTable& t);
void fill_avx512_vnni(KernelTable& t);
// AMX-INT8 kernels (kernels_amx.cpp) for the interleaved types they cover, over an AVX-512 VNNI table
// whose kernels they keep for products with fewer than kAmxMinRows activation rows. Same bits as every
// other path. set_amx_enabled(false) sends every call to those kept kernels (A/B measurement, tests).
constexpr int kAmxMinRows = 16;
void fill_amx(KernelTable& t);
void set_amx_enabled(bool on);
bool amx_enabled();

// The kernel table of the active path (dispatch.cpp).
const KernelTable& active_kernels();
// Runs one matmul through an explicit table (self-test; matmul() uses the active one).
void matmul_with(const KernelTable& k, ThreadPool* pool, MatmulScratch& scratch, GgmlType wt, const void* w,
                 int64_t n_in, int64_t n_out, const float* x, int64_t n_rows, float* y, int64_t y_stride,
                 WeightLayout layout = WeightLayout::Rows, const SideTasks* side = nullptr);
// Scalar reference kernels for the interleaved layout (interleave.cpp).
void fill_il_scalar(KernelTable& t);

}  // namespace ls::quant
