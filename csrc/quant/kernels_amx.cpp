// AMX-INT8 kernels over row-interleaved records (quant_internal.h KIlFormat: Q4_K, Q5_K, Q6_K, IQ4_XS against Q8_K
// activations; IlFormat: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, further below), for products with at
// least kAmxMinRows activation rows (prefill, large batches).
//
// Why the weights are widened first. A K-quant sub-block has its own integer scale per weight row, and
// the exact integer of a super-block is Σ_j scale_j · dot_j. A tile product cannot apply a per-column
// scale, so instead of one tile product per sub-block (K = 16 or 32, then a vpmulld per row) each code c
// of row i is multiplied by its scale once per group, p = c · scale (|p| < 2^15), and split into bytes
// p = lo + 256·hi. Then Σ_j scale_j · dot_j = A·LO + 256·(A·HI): two accumulating tile products over
// the whole super-block at K = 64, stored once per super-block. The widening is done once per 16-row
// group, super-block and chunk of 128 activation rows, and reused by that chunk's activation tiles; the
// exact int32 is the zmm kernels', and
// the float operations after it are those of il_kquant_zmm.h, so results are bit-identical to every
// other path (the start-up self-test checks it like any path's kernels).
//
// Tiles: C_lo = 0, C_hi = 1 (16 activation rows × 16 weight rows, int32); A = 2 / 5 (16 activation rows ×
// 64 bytes); B_lo = 3 / 6, B_hi = 4 / 7 (16 lines × 16 weight rows × 4 bytes). Two A/B sets alternate
// between K-steps so loads overlap the products. A tile always has 16 rows: the last tile of a call
// starts 16 rows before the end and its already-finished rows are skipped (so one tile configuration
// serves every call; calls with fewer rows take the zmm kernels).
#include <immintrin.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include <vector>

#include "quant/quant_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "quant/rows_driver.h"

namespace ls::quant {
namespace {

#include "quant/il_zmm.h"          // ZIl<T>: the 32-block records' code unpacking and scales
#include "quant/il_kquant_zmm.h"  // ZKIl<Q6_K>::q6_code: Q6_K's 6-bit codes of an element step

constexpr int kTileRows = 16;     // activation rows of an A / C tile (the AMX maximum)
constexpr int kChunkRows = 128;   // activation rows whose float accumulators one group pass keeps
constexpr int kKSteps = 4;        // K = 64 tile products per 256-element super-block

RowsFn g_fallback[kNumTypeSlots];  // the kernels these replace, for calls below kAmxMinRows
std::atomic<bool> g_amx_on{true};

// Whether a call runs on tiles; otherwise it goes to the kernels fill_amx replaced.
inline bool tiles_take(const ActView& a) {
  return a.n_rows >= kAmxMinRows && g_amx_on.load(std::memory_order_relaxed);
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// GCC's tile intrinsics pass only a pointer to their asm (no memory operand), so the compiler is not told
// that a tile load reads the bytes just stored by the widening code: a memory clobber orders them.
inline void tile_reads_memory() { asm volatile("" ::: "memory"); }

const TileConfig& tile_config() {
  static const TileConfig cfg = [] {
    TileConfig c;
    for (int t = 0; t < 8; ++t) c.colsb[t] = 64, c.rows[t] = kTileRows;
    return c;
  }();
  return cfg;
}

// Widened codes of one super-block of a 16-row group: per K-step, the LO and HI byte planes in B-tile
// layout (line l: bytes 4i..4i+3 = row i's 4 elements 64·step + 4l..+3).
struct Widened {
  alignas(64) uint8_t lo[kKSteps][16 * 64];
  alignas(64) uint8_t hi[kKSteps][16 * 64];
};

// One 64-byte line of codes (u8 per element, row i in dword i) times the row scales (int16, the same
// value in both words of dword i), split into the low and high bytes of each 16-bit product.
// kSignedCodes: the code bytes are int8 values (IQ4_XS's table values), not unsigned codes.
template <bool kSignedCodes = false>
inline void widen_line(__m512i codes, __m512i scale_w, uint8_t* lo, uint8_t* hi) {
  const __m512i even = kSignedCodes ? _mm512_srai_epi16(_mm512_slli_epi16(codes, 8), 8)
                                    : _mm512_and_si512(codes, _mm512_set1_epi16(0x00ff));
  const __m512i odd = kSignedCodes ? _mm512_srai_epi16(codes, 8) : _mm512_srli_epi16(codes, 8);
  const __m512i pe = _mm512_mullo_epi16(even, scale_w), po = _mm512_mullo_epi16(odd, scale_w);
  const __mmask64 odd_bytes = 0xaaaaaaaaaaaaaaaaull;
  _mm512_store_si512(lo, _mm512_mask_blend_epi8(odd_bytes, pe, _mm512_slli_epi16(po, 8)));
  _mm512_store_si512(hi, _mm512_mask_blend_epi8(odd_bytes, _mm512_srli_epi16(pe, 8), po));
}

// The accumulator a super-block's float step adds to: zero for the first super-block (as the zmm kernels' zeroed
// accumulators; fma(x, y, +0) is what they compute there), else the stored one.
inline __m512 acc_before(const float* p, int64_t s) { return s == 0 ? _mm512_setzero_ps() : _mm512_load_ps(p); }

// Row scales as int32 per dword (|scale| < 2^15) → the same int16 in both words.
inline __m512i words_of(__m512i s32) {
  const __m512i low = _mm512_and_si512(s32, _mm512_set1_epi32(0xffff));
  return _mm512_or_si512(low, _mm512_slli_epi32(low, 16));
}

template <GgmlType T>
struct AmxK;

// Q4_K / Q5_K: K-step c = chunk c (64 elements): sub-block 2c in the low nibbles, 2c+1 in the high ones; Q5_K's
// bit j of a qh byte is bit 4 of that element's code in sub-block j (codes ≤ 31, |c·scale| ≤ 1953).
template <GgmlType T>
struct AmxQ45K {
  static constexpr KIlFormat F = kil_format(T);
  static constexpr bool kSignedHi = false, kMins = true;
  static void widen(const uint8_t* rec, Widened& w) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
    for (int c = 0; c < kKSteps; ++c) {
      const __m512i s_lo = words_of(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + F.sc_off + 16 * (2 * c)))));
      const __m512i s_hi = words_of(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + F.sc_off + 16 * (2 * c + 1)))));
      for (int l = 0; l < 8; ++l) {
        const __m512i x = _mm512_loadu_si512(rec + F.qs_off + (8 * c + l) * 64);
        __m512i lo = _mm512_and_si512(x, m4), hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
        if (T == GgmlType::Q5_K) {  // as il_kquant_zmm.h: bit j of each qh byte → bit 4 of sub-block j's code
          const __m512i qh = _mm512_loadu_si512(rec + F.qh_off + l * 64);
          lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 2 * c), one), 4));
          hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 2 * c + 1), one), 4));
        }
        widen_line(lo, s_lo, w.lo[c] + 64 * l, w.hi[c] + 64 * l);
        widen_line(hi, s_hi, w.lo[c] + 64 * (8 + l), w.hi[c] + 64 * (8 + l));
      }
    }
  }
  // What the float step needs of a record, loaded once per record (not per activation row).
  struct Rec {
    __m512 dw, dmw;
    __m512i mp[4];
    explicit Rec(const uint8_t* rec)
        : dw(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)))),
          dmw(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32)))) {
      for (int p = 0; p < 4; ++p)
        mp[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + F.m_off + 32 * p)));
    }
  };
  // The float step of one activation row after its exact super-block integer `sumi` (il_kquant_zmm.h's Q4_K order).
  static void finish(const Rec& rc, __m512i sumi, const ActView& a, int64_t row, int64_t s, float* acc, float* accm) {
    // Sums of the activation block sums by sub-block pair as int16 pairs (|.| ≤ 8128): dwords 0, 1, 4, 5 of
    // packs(pairs) are pairs {0,1}, {2,3}, {4,5}, {6,7}, the operands of il_kquant_zmm.h's vpdpwssd.
    const __m256i pairs = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums(row) + 16 * s)),
                                            _mm256_set1_epi16(1));
    alignas(32) int32_t packed[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(packed), _mm256_packs_epi32(pairs, pairs));
    __m512i summ = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) summ = _mm512_dpwssd_epi32(summ, rc.mp[p], _mm512_set1_epi32(packed[p < 2 ? p : p + 2]));
    const __m512 da = _mm512_set1_ps(a.sc(row)[s]);
    _mm512_store_ps(acc, _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(rc.dw, da), acc_before(acc, s)));
    _mm512_store_ps(accm, _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(rc.dmw, da), acc_before(accm, s)));
  }
};

template <>
struct AmxK<GgmlType::Q4_K> : AmxQ45K<GgmlType::Q4_K> {};
template <>
struct AmxK<GgmlType::Q5_K> : AmxQ45K<GgmlType::Q5_K> {};

// Q6_K: K-step t = elements 64t..64t+63 = half t/2, element steps 16·(t%2)..+15 (16-element sub-blocks 4t..4t+3).
template <>
struct AmxK<GgmlType::Q6_K> {
  static constexpr KIlFormat F = kil_format(GgmlType::Q6_K);
  static constexpr bool kSignedHi = true, kMins = false;
  static void widen(const uint8_t* rec, Widened& w) {
    for (int t = 0; t < kKSteps; ++t) {
      for (int q = 0; q < 4; ++q) {  // sub-block 4t + q = lines 4q..4q+3 = element steps E0..E0+3 of half t/2
        const int sb = 4 * t + q;
        const __m512i pr = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + F.sc_off + 32 * (sb / 2))));
        const __m512i one = (sb & 1) ? _mm512_srli_epi32(pr, 16) : _mm512_and_si512(pr, _mm512_set1_epi32(0xffff));
        const __m512i scale_w = words_of(one);
        for (int k = 0; k < 4; ++k) {
          const int l = 4 * q + k;
          widen_line(ZKIl<GgmlType::Q6_K>::q6_code(rec, t / 2, 16 * (t % 2) + l), scale_w, w.lo[t] + 64 * l, w.hi[t] + 64 * l);
        }
      }
    }
  }
  struct Rec {
    __m512 dw;
    __m512i pr[8];
    explicit Rec(const uint8_t* rec) : dw(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)))) {
      for (int p = 0; p < 8; ++p)
        pr[p] = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + F.sc_off + 32 * p)));
    }
  };
  static void finish(const Rec& rc, __m512i sumi, const ActView& a, int64_t row, int64_t s, float* acc, float*) {
    const int16_t* bs = a.bsums(row) + 16 * s;
    __m512i corr = _mm512_setzero_si512();  // Σ scale·bsum per row: the codes' −32
    for (int p = 0; p < 8; ++p)
      corr = _mm512_dpwssd_epi32(corr, rc.pr[p], _mm512_set1_epi32(int(load_u32(reinterpret_cast<const uint8_t*>(bs + 2 * p)))));
    sumi = _mm512_sub_epi32(sumi, _mm512_slli_epi32(corr, 5));
    _mm512_store_ps(acc, _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(rc.dw, _mm512_set1_ps(a.sc(row)[s])), acc_before(acc, s)));
  }
};

// IQ4_XS: K-step c = sub-blocks 2c, 2c+1; a nibble indexes kIq4Values (signed), the sub-block scales are signed
// (6-bit value − 32), so |value · scale| ≤ 127 · 32 and the high byte plane is signed.
template <>
struct AmxK<GgmlType::IQ4_XS> {
  static constexpr KIlFormat F = kil_format(GgmlType::IQ4_XS);
  static constexpr bool kSignedHi = true, kMins = false;
  static void widen(const uint8_t* rec, Widened& w) {
    const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values)));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int c = 0; c < kKSteps; ++c)
      for (int half = 0; half < 2; ++half) {
        const int j = 2 * c + half;
        const __m512i scale_w =
            words_of(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + F.sc_off + 16 * j))));
        for (int t = 0; t < 4; ++t) {  // line t of sub-block j: elements 32j+4t.. (low nibbles), 32j+16+4t.. (high)
          const __m512i x = _mm512_loadu_si512(rec + F.qs_off + (4 * j + t) * 64);
          const int l = 8 * half + t;
          widen_line<true>(_mm512_shuffle_epi8(tab, _mm512_and_si512(x, m4)), scale_w, w.lo[c] + 64 * l, w.hi[c] + 64 * l);
          widen_line<true>(_mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(x, 4), m4)), scale_w,
                           w.lo[c] + 64 * (l + 4), w.hi[c] + 64 * (l + 4));
        }
      }
  }
  struct Rec {
    __m512 dw;
    explicit Rec(const uint8_t* rec) : dw(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)))) {}
  };
  static void finish(const Rec& rc, __m512i sumi, const ActView& a, int64_t row, int64_t s, float* acc, float*) {
    _mm512_store_ps(acc, _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(rc.dw, _mm512_set1_ps(a.sc(row)[s])),
                                         acc_before(acc, s)));
  }
};

// The two K-steps ks, ks+1 of one 16-row activation tile starting at row r0, on tile sets 2-4 and 5-7.
template <bool kSignedHi>
inline void products(const Widened& w, const ActView& a, int64_t r0, int64_t s) {
  tile_reads_memory();
  const int8_t* q = a.q(r0) + 256 * s;
  const long stride = long(a.row_bytes);
  for (int ks = 0; ks < kKSteps; ks += 2) {
    _tile_loadd(2, q + 64 * ks, stride);
    _tile_loadd(3, w.lo[ks], 64);
    _tile_loadd(4, w.hi[ks], 64);
    _tile_loadd(5, q + 64 * (ks + 1), stride);
    _tile_loadd(6, w.lo[ks + 1], 64);
    _tile_loadd(7, w.hi[ks + 1], 64);
    _tile_dpbsud(0, 2, 3);
    if (kSignedHi) _tile_dpbssd(1, 2, 4); else _tile_dpbsud(1, 2, 4);
    _tile_dpbsud(0, 5, 6);
    if (kSignedHi) _tile_dpbssd(1, 5, 7); else _tile_dpbsud(1, 5, 7);
  }
}

template <GgmlType T>
void run_amx_groups(const uint8_t* w, size_t w_stride, int64_t o0, int64_t o1, const ActView& a, float* y,
                    int64_t y_stride) {
  using K = AmxK<T>;
  if (!tiles_take(a)) return g_fallback[slot(T)](w, w_stride, o0, o1, a, y, y_stride);
  const int64_t nsb = a.n_in / 256;
  const size_t group_bytes = size_t(nsb) * size_t(K::F.rec_bytes);
  Widened wide;
  alignas(64) int32_t c_lo[kTileRows * 16], c_hi[kTileRows * 16];
  alignas(64) float acc[kChunkRows * 16], accm[kChunkRows * 16];
  tile_reads_memory();
  _tile_loadconfig(&tile_config());
  for (int64_t g = o0 / kInterleaveRows; g < o1 / kInterleaveRows; ++g) {
    const uint8_t* gp = w + size_t(g) * group_bytes;
    for (int64_t c0 = 0; c0 < a.n_rows; c0 += kChunkRows) {
      const int64_t c1 = c0 + kChunkRows < a.n_rows ? c0 + kChunkRows : a.n_rows;
      for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* rec = gp + size_t(s) * K::F.rec_bytes;
        K::widen(rec, wide);
        const typename K::Rec rc(rec);
        for (int64_t r = c0; r < c1; r += kTileRows) {
          const int64_t t0 = r + kTileRows <= a.n_rows ? r : a.n_rows - kTileRows;  // rows t0..t0+15 (≥ 0)
          _tile_zero(0);
          _tile_zero(1);
          products<K::kSignedHi>(wide, a, t0, s);
          _tile_stored(0, c_lo, 64);
          _tile_stored(1, c_hi, 64);
          const int64_t end = r + kTileRows < c1 ? r + kTileRows : c1;
          for (int64_t row = r; row < end; ++row) {
            const int k = int(row - t0);
            const __m512i sumi = _mm512_add_epi32(_mm512_load_si512(c_lo + 16 * k),
                                                  _mm512_slli_epi32(_mm512_load_si512(c_hi + 16 * k), 8));
            K::finish(rc, sumi, a, row, s, acc + 16 * (row - c0), accm + 16 * (row - c0));
          }
        }
      }
      for (int64_t row = c0; row < c1; ++row) {  // the zmm kernels store acc − accm, accm = 0 without mins
        const __m512 v = _mm512_load_ps(acc + 16 * (row - c0));
        _mm512_storeu_ps(y + row * y_stride + g * kInterleaveRows,
                         K::kMins ? _mm512_sub_ps(v, _mm512_load_ps(accm + 16 * (row - c0))) : v);
      }
    }
  }
  _tile_release();
}


// ---- 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4) ----
// Every block has its own float scales, so each block is its own tile product: the A tile holds an activation
// block pair (64 bytes in the activation order), and each block of the pair has a B tile whose lines facing the
// other block are zero. Codes are the signed values (u − bias_k) against TDPBSSD, or Q4_1 / Q5_1's unsigned
// codes against TDPBSUD, so the dot is the row kernels' exact int32 with no bias term.
template <GgmlType T>
struct AmxBlk {
  using Z = ZIl<T>;
  static constexpr IlFormat F = Z::F;
  static constexpr bool kSigned = Z::kBias;
  static constexpr int kBiasK = T == GgmlType::Q4_0 ? 8 : T == GgmlType::Q5_0 ? 16 : 128;
  static constexpr bool kNatural = T == GgmlType::Q8_0;  // act_format(T).order
  static constexpr size_t kPairBytes = 2 * 16 * 64;     // B tiles of the even and the odd block

  // B line l of a pair faces activation bytes 4l..4l+3: Natural [blk0 | blk1]; PairPerm
  // [blk0 0..15 | blk1 0..15 | blk0 16..31 | blk1 16..31]. Returns (block half, step) of line l.
  static void line_source(int l, int& half, int& step) {
    if (kNatural) {
      half = l / 8, step = l % 8;
    } else {
      half = (l / 4) & 1, step = (l % 4) + 4 * (l / 8);
    }
  }
  // The B tiles of blocks 2p and 2p+1 (absent past nb: zeros) of a group at gp.
  static void widen_pair(const uint8_t* gp, int64_t p, int64_t nb, uint8_t* out) {
    __m512i u[2][8];
    for (int h = 0; h < 2; ++h) {
      const int64_t b = 2 * p + h;
      if (b < nb) {
        Z::unpack(gp + size_t(b) * F.rec_bytes, u[h]);
        if (kSigned)
          for (int j = 0; j < 8; ++j) u[h][j] = _mm512_sub_epi8(u[h][j], _mm512_set1_epi8(char(kBiasK)));
      } else {
        for (int j = 0; j < 8; ++j) u[h][j] = _mm512_setzero_si512();
      }
    }
    for (int l = 0; l < 16; ++l) {
      int half, step;
      line_source(l, half, step);
      _mm512_store_si512(out + 64 * l, half == 0 ? u[0][step] : _mm512_setzero_si512());
      _mm512_store_si512(out + 1024 + 64 * l, half == 1 ? u[1][step] : _mm512_setzero_si512());
    }
  }
  // The exact dots of one activation tile (rows at aq, 64 bytes of a block pair) with both blocks of the
  // pair's B tiles at bp, stored to out[half][row][weight row]. Two tile sets alternate: C tiles 0, 1 with A
  // tile 2, or 5, 6 with 7 (GCC's tile intrinsics take literal tile numbers); B tiles 3 and 4 are reloaded
  // each time (their loads are cheap; 8 tiles do not hold two full sets).
  static void pair_products(int set, const int8_t* aq, long stride, const uint8_t* bp, int32_t* out) {
    tile_reads_memory();
#define LS_AMX_PAIR(CE, CO, A, DP)         \
  _tile_loadd(A, aq, stride);              \
  _tile_loadd(3, bp, 64);                  \
  _tile_loadd(4, bp + 1024, 64);           \
  _tile_zero(CE);                          \
  _tile_zero(CO);                          \
  DP(CE, A, 3);                            \
  DP(CO, A, 4);                            \
  _tile_stored(CE, out, 64);               \
  _tile_stored(CO, out + 256, 64)
    if (kSigned) {
      if (set == 0) { LS_AMX_PAIR(0, 1, 2, _tile_dpbssd); } else { LS_AMX_PAIR(5, 6, 7, _tile_dpbssd); }
    } else {
      if (set == 0) { LS_AMX_PAIR(0, 1, 2, _tile_dpbsud); } else { LS_AMX_PAIR(5, 6, 7, _tile_dpbsud); }
    }
#undef LS_AMX_PAIR
  }
};

// The group's widened pairs, per thread: grown to the largest n_in once, reused by every call.
uint8_t* pair_buffer(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes + 64) buf.resize(bytes + 64);
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t(63));
}

template <GgmlType T>
void run_amx_blocks(const uint8_t* w, size_t w_stride, int64_t o0, int64_t o1, const ActView& a, float* y,
                    int64_t y_stride) {
  using K = AmxBlk<T>;
  if (!tiles_take(a)) return g_fallback[slot(T)](w, w_stride, o0, o1, a, y, y_stride);
  const int64_t nb = a.n_in / 32, n_pairs = (nb + 1) / 2;
  const size_t group_bytes = w_stride * kInterleaveRows;
  uint8_t* wide = pair_buffer(size_t(n_pairs) * K::kPairBytes);
  alignas(64) int32_t c[2][2 * kTileRows * 16];  // [pair parity][block half][row][weight row]
  tile_reads_memory();
  _tile_loadconfig(&tile_config());
  for (int64_t g = o0 / kInterleaveRows; g < o1 / kInterleaveRows; ++g) {
    const uint8_t* gp = w + size_t(g) * group_bytes;
    for (int64_t p = 0; p < n_pairs; ++p) K::widen_pair(gp, p, nb, wide + size_t(p) * K::kPairBytes);
    for (int64_t r = 0; r < a.n_rows; r += kTileRows) {
      const int64_t t0 = r + kTileRows <= a.n_rows ? r : a.n_rows - kTileRows;  // rows t0..t0+15 (≥ 0)
      __m512 acc[kTileRows];
      for (int k = 0; k < kTileRows; ++k) acc[k] = _mm512_setzero_ps();
      const float* sc0 = a.sc(t0);
      const size_t sc_stride = a.row_bytes / sizeof(float);
      // Software pipeline: the tile products of pair p + 1 (into the other C tiles) are issued before the
      // float steps of pair p read its stored results, so the loads after a tile store do not stall the tiles.
      const int8_t* aq = a.q(t0);
      const long stride = long(a.row_bytes);
      K::pair_products(0, aq, stride, wide, c[0]);
      for (int64_t p = 0; p < n_pairs; ++p) {
        if (p + 1 < n_pairs) {
          const uint8_t* next = wide + size_t(p + 1) * K::kPairBytes;
          K::pair_products(int((p + 1) % 2), aq + 64 * (p + 1), stride, next, c[(p + 1) % 2]);
        }
        const int32_t* cp = c[p % 2];
        for (int h = 0; h < 2 && 2 * p + h < nb; ++h) {
          const int64_t b = 2 * p + h;
          const uint8_t* rec = gp + size_t(b) * K::F.rec_bytes;
          const __m512 dw = K::Z::scales(rec);
          const __m512 mw = K::F.min ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + K::F.m_off)))
                                     : _mm512_setzero_ps();
#pragma GCC unroll 16
          for (int k = 0; k < kTileRows; ++k) {  // il_zmm.h's float steps, row by row
            const float* asc = sc0 + size_t(k) * sc_stride;
            const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(asc[2 * b]));
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cp + 256 * h + 16 * k)), s, acc[k]);
            if (K::F.min) acc[k] = _mm512_fmadd_ps(mw, _mm512_set1_ps(asc[2 * b + 1]), acc[k]);
          }
        }
      }
      for (int k = int(r - t0); k < kTileRows; ++k) _mm512_storeu_ps(y + (t0 + k) * y_stride + g * kInterleaveRows, acc[k]);
    }
  }
  _tile_release();
}

}  // namespace

void fill_amx(KernelTable& t) {
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                        GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::IQ4_NL, GgmlType::MXFP4})
    g_fallback[slot(type)] = t.il_rows[slot(type)];
  t.il_rows[slot(GgmlType::Q4_K)] = &run_amx_groups<GgmlType::Q4_K>;
  t.il_rows[slot(GgmlType::Q5_K)] = &run_amx_groups<GgmlType::Q5_K>;
  t.il_rows[slot(GgmlType::Q6_K)] = &run_amx_groups<GgmlType::Q6_K>;
  t.il_rows[slot(GgmlType::IQ4_XS)] = &run_amx_groups<GgmlType::IQ4_XS>;
  t.il_rows[slot(GgmlType::Q4_0)] = &run_amx_blocks<GgmlType::Q4_0>;
  t.il_rows[slot(GgmlType::Q4_1)] = &run_amx_blocks<GgmlType::Q4_1>;
  t.il_rows[slot(GgmlType::Q5_0)] = &run_amx_blocks<GgmlType::Q5_0>;
  t.il_rows[slot(GgmlType::Q5_1)] = &run_amx_blocks<GgmlType::Q5_1>;
  t.il_rows[slot(GgmlType::Q8_0)] = &run_amx_blocks<GgmlType::Q8_0>;
  t.il_rows[slot(GgmlType::IQ4_NL)] = &run_amx_blocks<GgmlType::IQ4_NL>;
  t.il_rows[slot(GgmlType::MXFP4)] = &run_amx_blocks<GgmlType::MXFP4>;
}

void set_amx_enabled(bool on) { g_amx_on.store(on, std::memory_order_relaxed); }
bool amx_enabled() { return g_amx_on.load(std::memory_order_relaxed); }

}  // namespace ls::quant

#pragma GCC pop_options
