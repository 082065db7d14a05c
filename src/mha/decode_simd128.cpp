// The SIMD decode kernel (xsimd; WebAssembly SIMD128 when compiled with Emscripten): one work item of
// decode_kernel.hpp, the rows of one (batch item, KV head) against one block of at most 512 keys, in
// four phases:
//   1. pack q: rows in chunks of 4, each chunk a panel (Dh, 4) so one step broadcasts 4 adjacent floats;
//   2. scores (rows, keys) = q . k, panel by panel (32 keys of K^T, kv_cache.hpp), each panel (or 8-key
//      strip of it, qk_chunks) used by every row chunk while it is in L1: a micro-kernel of R rows x 8P
//      keys, R*2P accumulators (R = 1: 32 keys);
//   3. per row: log2-unit scores (scale, softcap with simd_tanh.hpp, ALiBi), hidden keys -inf, max m,
//      p = 2^(s - m), sum l;
//   4. o (rows, Dh8) = p V, 32 keys at a time, a micro-kernel of R rows x 8L lanes (R = 1: 32 lanes).
// The softmax of a block is two-pass (its scores fit in scratch), so no running rescale; blocks are
// merged by the driver.
// float32 items of 3 or more rows first read the whole block into L2 (touch_block), and then every chunk
// reads the cache directly (run). Other items of 2 or more rows read each K panel (float16 of 3 or more
// rows: each V tile) once, in address order, into an L1 scratch tile, copied or widened from halves,
// which every chunk then reads (a tile, never a copy of the cache); see run_f16 for why and for the
// direct float16 paths (halves widened in registers with 5 integer operations per 8, f16.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "mha/decode.hpp"
#include "mha/decode_kernel.hpp"
#include "mha/f16.hpp"
#include "mha/simd_exp.hpp"
#include "mha/simd_tanh.hpp"
#include "mha/workspace.hpp"

#ifdef MHA_PROFILE_NOINLINE  // profiling builds only: keeps each phase a separate function for perf
#define MHA_PHASE __attribute__((noinline))
#else
#define MHA_PHASE
#endif
// The phase-timing harness (bench/kernel/bench_decode.cpp, `phases`) compiles this file again into its
// own namespace with MHA_DECODE_PHASE_MASK, and skips phases by clearing bits of decode_phase_mask.
#ifdef MHA_DECODE_PHASE_MASK
#define MHA_RUN_PHASE(bit) ((decode_phase_mask & (bit)) != 0)
#else
#define MHA_RUN_PHASE(bit) true
#endif

namespace mha {
namespace simd128 {
namespace {

using simd::VecF;
using simd::VecI;
constexpr int32_t kLanes = 4;
static_assert(VecF::size == kLanes, "the micro-kernels are written for 4-lane vectors");
constexpr int32_t kP = kKeysPerPanel;           // keys per K panel, and per PV tile
constexpr int32_t kS = kDecodeMaxKeysPerBlock;  // row stride of the scores (a constant: immediate offsets)
constexpr int32_t kChunk = 4;                   // rows per micro-kernel call
constexpr int32_t kMaxChunks = kDecodeMaxRowsPerItem / kChunk;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

#ifdef MHA_DECODE_PHASE_MASK
int decode_phase_mask = 15;  // 1 pack q, 2 scores, 4 softmax, 8 values
#endif

// Loaders: 8 consecutive stored elements (16-byte aligned) as two float vectors.
struct F32Loader {
  using Elem = float;
  void load8(const float* p, VecF& lo, VecF& hi) const {
    lo = VecF::load_aligned(p);
    hi = VecF::load_aligned(p + kLanes);
  }
};
// kScaled: the widened values lack the factor 2^112 (f16.hpp), which the caller has folded into the
// other operand (q for scores, the weights for values): one multiply fewer per 4 halves, same products.
template <bool kSpecials, bool kScaled>
struct F16Loader {
  using Elem = uint16_t;
  f16::simd::Constants constants;
  void load8(const uint16_t* p, VecF& lo, VecF& hi) const { f16::simd::load8<kSpecials, kScaled>(p, lo, hi, constants); }
};

// Float16 for the one-row step: 8 halves as their even (0, 2, 4, 6) and odd (1, 3, 5, 7) elements, 2^-112
// times the values (the caller folds 2^112 into the other operand; no inf/NaN). Per 32-bit lane of two
// halves, an arithmetic shift by 3 puts the upper half's sign at bit 31 (and copies of it at 30..28) and
// its bits 14..0 at 27..13, and a mask keeps just those: 2 operations for the odd halves, 3 (a shift up
// by 16 first) for the even ones, no interleaves (f16.hpp's load8: 5 operations, 2 of them shuffles,
// which compete with the shifts for the same ports). The micro-kernels that read it (qk_row_touching,
// pv_rows<1>) keep their sums in that order and put them back in key (or lane) order once at the end.
struct F16PairLoader {
  using Elem = uint16_t;
  VecI keep_sign_and_magnitude = VecI(static_cast<int32_t>(0x8fffe000u));
  F16PairLoader() { mha::simd::pin_in_register(keep_sign_and_magnitude); }
  void load8(const uint16_t* p, VecF& even, VecF& odd) const {
    const __m128i x = _mm_load_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i keep = keep_sign_and_magnitude.data;
    even = VecF(_mm_castsi128_ps(_mm_and_si128(_mm_srai_epi32(_mm_slli_epi32(x, 16), 3), keep)));
    odd = VecF(_mm_castsi128_ps(_mm_and_si128(_mm_srai_epi32(x, 3), keep)));
  }
};
template <class Ld>
constexpr bool kPairs = std::is_same<Ld, F16PairLoader>::value;

// Elements 0, 2, 4, 6 in even and 1, 3, 5, 7 in odd -> 0..3 at dst, 4..7 at dst + 4.
inline void store_pairs(VecF even, VecF odd, float* dst) {
  VecF(_mm_unpacklo_ps(even.data, odd.data)).store_aligned(dst);
  VecF(_mm_unpackhi_ps(even.data, odd.data)).store_aligned(dst + kLanes);
}

struct Layout {
  size_t q = 0, s = 0, k_stage = 0, v_stage = 0, total = 0;
};

Layout make_layout(int32_t dh) {
  const size_t dh8 = static_cast<size_t>(round_up_to(dh, 8));
  Layout lay;
  ScratchCursor cursor;
  lay.q = cursor.take(size_t(kMaxChunks) * dh * kChunk);    // q chunks as panels (Dh, 4)
  lay.s = cursor.take(size_t(kDecodeMaxRowsPerItem) * kS);  // scores, then weights (rows, kS)
  lay.k_stage = cursor.take(size_t(kP) * dh8);              // one widened K panel (Dh, P)
  lay.v_stage = cursor.take(size_t(kP) * dh8);              // one widened V tile (P, Dh8)
  lay.total = cursor.at;
  return lay;
}

// ---------------------------------------------------------------------------------------------------
// Micro-kernels. Loops over R, P, L have constant bounds: LLVM unrolls them and keeps the arrays in
// registers. Broadcasts are taken first and each key (or lane) group is consumed as soon as it is loaded,
// so at most R + 2 + R*2P vectors are live (<= 14 of the 16 xmm registers).

// s[r * kS + c] = q_r . k_c for rows r < R and keys c < 8P of a panel column group (row d of the panel
// group at panel + d * kP). qpanel (Dh, 4).
template <int R, int P, class Ld>
inline void qk_micro(const float* qpanel, const typename Ld::Elem* panel, int32_t dh, float* s, const Ld& ld) {
  VecF acc[R][2 * P];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < 2 * P; ++x) acc[r][x] = VecF(0.0f);
  for (int32_t d = 0; d < dh; ++d, qpanel += kChunk, panel += kP) {
    VecF b[R];
    for (int r = 0; r < R; ++r) b[r] = VecF(qpanel[r]);
    for (int p = 0; p < P; ++p) {
      VecF k0, k1;
      ld.load8(panel + 8 * p, k0, k1);
      for (int r = 0; r < R; ++r) {
        acc[r][2 * p] += b[r] * k0;
        acc[r][2 * p + 1] += b[r] * k1;
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < 2 * P; ++x) acc[r][x].store_aligned(s + r * kS + kLanes * x);
}

// o[r * dh8 + c] += sum_j p[r * kS + j] * v[j * dh8 + c] for rows r < R, lanes c < 8L, keys j < nk.
template <int R, int L, class Ld>
inline void pv_micro(const float* p, const typename Ld::Elem* v, int32_t dh8, int32_t nk, float* o, const Ld& ld) {
  VecF acc[R][2 * L];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < 2 * L; ++x) acc[r][x] = VecF::load_aligned(o + r * dh8 + kLanes * x);
  for (int32_t j = 0; j < nk; ++j, ++p, v += dh8) {
    VecF b[R];
    for (int r = 0; r < R; ++r) b[r] = VecF(p[r * kS]);
    for (int l = 0; l < L; ++l) {
      VecF v0, v1;
      ld.load8(v + 8 * l, v0, v1);
      for (int r = 0; r < R; ++r) {
        acc[r][2 * l] += b[r] * v0;
        acc[r][2 * l + 1] += b[r] * v1;
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < 2 * L; ++x) acc[r][x].store_aligned(o + r * dh8 + kLanes * x);
}

// Key groups per QK call and lane groups per PV call: R * 2 * groups = 8 accumulators.
template <int R>
constexpr int groups_for_rows() {
  return R == 1 ? 4 : (R == 2 ? 2 : 1);
}

// One row against the 32 keys of a panel (qk_micro<1, 4>), and after each panel row a touch of the
// next 32 * sizeof(Elem) bytes of V from `touch` (clamped to touch_last): loads OR-ed into `touched`,
// which the caller stores so that they stay (wasm has no prefetch). The V rows of the keys being scored
// are then read from memory while the panel streams in, and the PV phase finds them in L2. Interleaved
// A/B in wasm, decode-mha-8k, 1 thread, loaded machine: f32 1.11x median of 150 rounds, 73% of them
// faster; f16 1.01x (its passes are bound by the widening's instructions, not by memory). Touching the
// next block's K panels during PV as well: 0.82x (f32), 0.91x (f16). With F16PairLoader (session 4,
// 600 rounds in 3 runs): f16 without the touches 0.91-0.95x; touching K 2 panels ahead as well 0.91-0.92x;
// 2 panel rows per loop iteration 0.94-0.98x (f32 0.91-0.95x). The previous block's PV stepped inside
// this K pass (2 steps of 2 keys x 8 lanes per panel row, from L2), so that it overlaps the stream: f32
// 0.71x (EPYC, 30 rounds, machine loaded; not profiled).
// The touches are scalar loads into touched (a general register: the xmm registers hold the sums).
template <class Ld>
inline void qk_row_touching(const float* qpanel, const typename Ld::Elem* panel, int32_t dh, float* s, const Ld& ld,
                            const char*& touch, const char* touch_last, int32_t& touched) {
  constexpr int32_t kTouchBytes = kP * sizeof(typename Ld::Elem);
  VecF acc[8];
  for (int x = 0; x < 8; ++x) acc[x] = VecF(0.0f);
  for (int32_t d = 0; d < dh; ++d, qpanel += kChunk, panel += kP, touch += kTouchBytes) {
    const VecF b(qpanel[0]);
    for (int p = 0; p < 4; ++p) {
      VecF k0, k1;
      ld.load8(panel + 8 * p, k0, k1);
      acc[2 * p] += b * k0;
      acc[2 * p + 1] += b * k1;
    }
    for (int32_t t = 0; t < kTouchBytes; t += 64) touched |= *reinterpret_cast<const int32_t*>(std::min(touch + t, touch_last));
  }
  for (int p = 0; p < 4; ++p) {
    if (kPairs<Ld>) {
      store_pairs(acc[2 * p], acc[2 * p + 1], s + 8 * p);
    } else {
      acc[2 * p].store_aligned(s + 8 * p);
      acc[2 * p + 1].store_aligned(s + 8 * p + kLanes);
    }
  }
}

template <int R, class Ld>
inline void qk_panel(const float* qpanel, const typename Ld::Elem* panel, int32_t dh, float* s, const Ld& ld) {
  constexpr int P = groups_for_rows<R>();
  for (int32_t c = 0; c < kP; c += 8 * P) qk_micro<R, P>(qpanel, panel + c, dh, s + c, ld);
}

// o[r * dh8 + c] += sum_{j < K} p[r * kS + j] * v[j * dh8 + c] for rows r < R and every lane, the
// accumulators in o (L1).
template <int R, int K, class Ld>
inline void pv_keys(const float* p, const typename Ld::Elem* v, int32_t dh8, float* o, const Ld& ld) {
  VecF b[R][K];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < K; ++k) b[r][k] = VecF(p[r * kS + k]);
  for (int32_t c = 0; c < dh8; c += 8) {
    VecF acc[R][2];
    for (int r = 0; r < R; ++r) {
      acc[r][0] = VecF::load_aligned(o + r * dh8 + c);
      acc[r][1] = VecF::load_aligned(o + r * dh8 + c + kLanes);
    }
    for (int k = 0; k < K; ++k) {
      VecF v0, v1;
      ld.load8(v + k * dh8 + c, v0, v1);
      for (int r = 0; r < R; ++r) {
        acc[r][0] += b[r][k] * v0;
        acc[r][1] += b[r][k] * v1;
      }
    }
    for (int r = 0; r < R; ++r) {
      acc[r][0].store_aligned(o + r * dh8 + c);
      acc[r][1].store_aligned(o + r * dh8 + c + kLanes);
    }
  }
}

// PV for 1 or 2 rows: 4 keys at a time (one float32 row: 2), every value row read whole and in address
// order. With register accumulators for 32 lanes (pv_micro), a row of 64 floats or more is read in
// separate strided sweeps of the tile, each starting with misses when the tile comes from memory.
// Interleaved A/B in wasm on a loaded machine, decode-mha-8k f16: 5.0 ms (min of 40) against 8.7; f32
// within the noise. One float32 row: 4 keys interleave 4 rows' cache lines (0, 4, 8, 12, 1, 5, ...) and
// the tile streams slower than with 2 (0, 4, 1, 5, ...), though o is then loaded and stored twice as
// often: interleaved A/B, decode-mha-8k f32, 2 keys against 4: 1.12x median of 150 rounds, 88% of them
// faster (1 key: 1.11x; 8 keys: 0.86x, also with its sums paired; f16 with 2 or 1 keys: no gain).
template <int R, class Ld>
inline void pv_rows(const float* p, const typename Ld::Elem* v, int32_t dh8, int32_t nk, float* o, const Ld& ld) {
  int32_t j = 0;
  if (R == 1 && std::is_same<typename Ld::Elem, float>::value) {
    for (; j + 2 <= nk; j += 2) pv_keys<R, 2>(p + j, v + int64_t{j} * dh8, dh8, o, ld);
    if (j < nk) pv_keys<R, 1>(p + j, v + int64_t{j} * dh8, dh8, o, ld);
    return;
  }
  for (; j + 4 <= nk; j += 4) pv_keys<R, 4>(p + j, v + int64_t{j} * dh8, dh8, o, ld);
  for (; j < nk; ++j) pv_keys<R, 1>(p + j, v + int64_t{j} * dh8, dh8, o, ld);
}

template <int R, class Ld>
inline void pv_tile(const float* p, const typename Ld::Elem* v, int32_t dh8, int32_t nk, float* o, const Ld& ld) {
  if (R <= 2) return pv_rows<R>(p, v, dh8, nk, o, ld);
  constexpr int L = groups_for_rows<R>();
  int32_t c = 0;
  for (; c + 8 * L <= dh8; c += 8 * L) pv_micro<R, L>(p, v + c, dh8, nk, o + c, ld);
  for (; c < dh8; c += 8) pv_micro<R, 1>(p, v + c, dh8, nk, o + c, ld);
}

template <class Ld>
inline void qk_chunk(int32_t rows, const float* qpanel, const typename Ld::Elem* panel, int32_t dh, float* s, const Ld& ld) {
  switch (rows) {
    case 1: qk_panel<1>(qpanel, panel, dh, s, ld); break;
    case 2: qk_panel<2>(qpanel, panel, dh, s, ld); break;
    case 3: qk_panel<3>(qpanel, panel, dh, s, ld); break;
    default: qk_panel<4>(qpanel, panel, dh, s, ld); break;
  }
}

template <class Ld>
inline void pv_chunk(int32_t rows, const float* p, const typename Ld::Elem* v, int32_t dh8, int32_t nk, float* o, const Ld& ld) {
  switch (rows) {
    case 1: pv_tile<1>(p, v, dh8, nk, o, ld); break;
    case 2: pv_tile<2>(p, v, dh8, nk, o, ld); break;
    case 3: pv_tile<3>(p, v, dh8, nk, o, ld); break;
    default: pv_tile<4>(p, v, dh8, nk, o, ld); break;
  }
}

int32_t chunk_rows(const DecodeBlock& blk, int32_t chunk) { return std::min(kChunk, blk.rows - chunk * kChunk); }
int32_t chunk_count(const DecodeBlock& blk) { return (blk.rows + kChunk - 1) / kChunk; }

// Items of several chunks, all of 4 rows (MQA, G = 8 or 16, or G = 4 with several queries): the 8-key
// (8-lane) column strips of a panel (tile) in the outer loop and the chunks in the inner one, so that a
// strip comes from L2 once and every chunk then finds it in L1. Chunk by chunk, each chunk swept the whole
// panel (tile: 16 kB at Dh 128) again, and beside the scores and o it did not stay in L1. Interleaved A/B
// in wasm against chunk by chunk (bench_decode.js ab, 1 thread, 40-60 rounds, 3 runs, median per round):
// decode-mqa-8k f32 1.04-1.11x, f16 (staged tiles) 1.02-1.05x; items of one chunk are unchanged.
inline bool whole_chunks(int32_t rows) { return rows > kChunk && rows % kChunk == 0; }

// The whole-chunk loops on float32 panels and tiles (the cache's, or staged ones widened from halves):
// out of line, so that the module holds one copy of each (inlined at every call site and for every
// loader, they added 1.2-1.5 kB zlib to each SIMD module; issue #15's size budget).
__attribute__((noinline)) void qk_whole_chunks(int32_t chunks, const float* qp, const float* panel, int32_t dh, float* s_panel) {
  const F32Loader ld;
  for (int32_t g = 0; g < kP; g += 8) {
    for (int32_t c = 0; c < chunks; ++c) qk_micro<kChunk, 1>(qp + c * dh * kChunk, panel + g, dh, s_panel + c * kChunk * kS + g, ld);
  }
}
__attribute__((noinline)) void pv_whole_chunks(int32_t chunks, const float* p, const float* v, int32_t dh8, int32_t nk, float* o) {
  const F32Loader ld;
  for (int32_t lane = 0; lane < dh8; lane += 8) {
    for (int32_t c = 0; c < chunks; ++c) pv_micro<kChunk, 1>(p + c * kChunk * kS, v + lane, dh8, nk, o + c * kChunk * dh8 + lane, ld);
  }
}

// s (rows, kS) = q . k for the 32 keys of one panel (Dh, kP) and every chunk of the item.
template <class Ld>
inline void qk_chunks(const DecodeBlock& blk, const float* qp, const typename Ld::Elem* panel, float* s_panel, const Ld& ld) {
  const int32_t dh = blk.head_dim;
  const int32_t chunks = chunk_count(blk);
  if constexpr (std::is_same<Ld, F32Loader>::value) {
    if (whole_chunks(blk.rows)) return qk_whole_chunks(chunks, qp, panel, dh, s_panel);
  }
  for (int32_t c = 0; c < chunks; ++c)
    qk_chunk(chunk_rows(blk, c), qp + c * dh * kChunk, panel, dh, s_panel + c * kChunk * kS, ld);
}

// o (rows, Dh8) += p v over the nk keys of one tile (nk, Dh8) for every chunk of the item.
template <class Ld>
inline void pv_chunks(const DecodeBlock& blk, const float* p, const typename Ld::Elem* v, int32_t nk, const Ld& ld) {
  const int32_t dh8 = blk.dh8;
  const int32_t chunks = chunk_count(blk);
  if constexpr (std::is_same<Ld, F32Loader>::value) {
    if (whole_chunks(blk.rows)) return pv_whole_chunks(chunks, p, v, dh8, nk, blk.o);
  }
  for (int32_t c = 0; c < chunks; ++c)
    pv_chunk(chunk_rows(blk, c), p + c * kChunk * kS, v, dh8, nk, blk.o + c * kChunk * dh8, ld);
}

// count rows of 8-element groups (row_stride elements apart, `groups` per row) widened into floats.
template <class Ld>
void widen_rows(const typename Ld::Elem* src, int32_t rows, int32_t row_stride, int32_t groups, float* dst, const Ld& ld) {
  for (int32_t i = 0; i < rows; ++i, src += row_stride, dst += row_stride) {
    for (int32_t c = 0; c < groups * 8; c += 8) {
      VecF lo, hi;
      ld.load8(src + c, lo, hi);
      lo.store_aligned(dst + c);
      hi.store_aligned(dst + c + kLanes);
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Phases

// Phase 1: qp[c * Dh * 4 + d * 4 + r % 4] = q_scale * q of row r = 4c + r % 4 (q_scale is 1, or 2^112
// for |q| <= kMaxFoldableQ: exact).
MHA_PHASE void pack_q(const DecodeBlock& blk, float q_scale, float* qp) {
  for (int32_t r = 0; r < blk.rows; ++r) {
    float* panel = qp + (r / kChunk) * blk.head_dim * kChunk + r % kChunk;
    const float* q = blk.q_rows[r];
    for (int32_t d = 0; d < blk.head_dim; ++d) panel[d * kChunk] = q[d] * q_scale;
  }
}

// Largest q for which q * 2^112 stays finite with a margin (f16 scores fold 2^112 into q).
constexpr float kMaxFoldableQ = 16384.0f;

// Whether every q element of the block's rows is finite and at most kMaxFoldableQ, so that the float16
// widening's 2^112 can be folded into q (run_f16).
bool q_foldable(const DecodeBlock& blk) {
  for (int32_t r = 0; r < blk.rows; ++r) {
    for (int32_t d = 0; d < blk.head_dim; ++d) {
      if (!(std::fabs(blk.q_rows[r][d]) <= kMaxFoldableQ)) return false;  // NaN too
    }
  }
  return true;
}

// Before phase 2 of a compute-bound item (run): one load of every 64-byte line of the block's K panels
// and V rows (Elem: the cache's element), in address order, OR-ed into the value returned (kept by the
// caller). The lines are then in L2 when the micro-kernels read them. A loop of nothing but loads keeps
// many more misses in flight than micro-kernels that need one new line every few steps of arithmetic (wasm has no prefetch, and the out-of-order
// window covers only a few steps), so the block streams in at close to the memory's speed instead of
// at the pace of those steps. K and V are read side by side, 4 lines of each per iteration: against
// one after the other, interleaved A/B (40 rounds, 3 runs): decode-gqa-4k f32 1.06-1.10x, decode-b4
// 1.06-1.13x, decode-mqa-8k 1.01-1.04x; 4 streams (each half of K and of V) gained nothing more.
inline void touch_lines(const char* lines, int64_t from, int64_t to, int32_t& touched) {
  for (int64_t at = from; at < to; at += 64) touched |= *reinterpret_cast<const int32_t*>(lines + at);
}

template <class Elem>
MHA_PHASE int32_t touch_block(const DecodeBlock& blk, int32_t base) {
  constexpr int64_t kStep = 4 * 64;
  const int32_t panels = (blk.key_end - base + kP - 1) / kP;
  const auto* keys = static_cast<const char*>(blk.key_panels) + int64_t{base} * blk.head_dim * sizeof(Elem);
  const auto* values = static_cast<const char*>(blk.value_rows) + int64_t{blk.key_begin} * blk.dh8 * sizeof(Elem);
  const int64_t key_bytes = int64_t{panels} * kP * blk.head_dim * sizeof(Elem);
  const int64_t value_bytes = int64_t{blk.key_end - blk.key_begin} * blk.dh8 * sizeof(Elem);
  int32_t touched = 0;
  const int64_t both = std::min(key_bytes, value_bytes) / kStep * kStep;
  for (int64_t at = 0; at < both; at += kStep) {
    touch_lines(keys, at, at + kStep, touched);
    touch_lines(values, at, at + kStep, touched);
  }
  touch_lines(keys, both, key_bytes, touched);
  touch_lines(values, both, value_bytes, touched);
  return touched;
}

// Phase 2: s[r * kS + j - base] = q_r . k_j for the panels covering [base, key_end), base = the panel
// start at or before key_begin.
// stage: read each panel once into k_stage (ld must then give true values) and run every chunk on that.
template <class Ld>
MHA_PHASE void block_scores(const DecodeBlock& blk, int32_t base, const float* qp, float* s, float* k_stage, const Ld& ld,
                            bool stage) {
  using Elem = typename Ld::Elem;
  const int32_t dh = blk.head_dim;
  const int32_t panels = (blk.key_end - base + kP - 1) / kP;
  const Elem* panel = static_cast<const Elem*>(blk.key_panels) + int64_t{base / kP} * dh * kP;
  // Scaled halves never score one row (run_f16 gives it F16PairLoader): no such copy of the loop.
  constexpr bool kOneRow = !std::is_same<Ld, F16Loader<false, true>>::value;
  if (kOneRow && blk.rows == 1 && !stage) {  // the memory-bound one-row step: touch V ahead (qk_row_touching)
    const Elem* values = static_cast<const Elem*>(blk.value_rows);
    const char* touch = reinterpret_cast<const char*>(values + int64_t{base} * blk.dh8);
    const char* touch_last = reinterpret_cast<const char*>(values + int64_t{blk.key_end} * blk.dh8) - 16;
    int32_t touched = 0;
    for (int32_t pi = 0; pi < panels; ++pi, panel += int64_t{dh} * kP)
      qk_row_touching(qp, panel, dh, s + pi * kP, ld, touch, touch_last, touched);
    *reinterpret_cast<int32_t*>(k_stage) = touched;  // keeps the touches
    return;
  }
  if constexpr (!kPairs<Ld>) {  // F16PairLoader: one row only (run_f16), scored above
    const F32Loader widened;
    for (int32_t pi = 0; pi < panels; ++pi, panel += int64_t{dh} * kP) {
      float* s_panel = s + pi * kP;
      if (stage) {
        widen_rows(panel, dh, kP, kP / 8, k_stage, ld);
        qk_chunks(blk, qp, k_stage, s_panel, widened);
      } else {
        qk_chunks(blk, qp, panel, s_panel, ld);
      }
    }
  }
}

// Phase 3, one row: the scores of lanes [g0, g1) (4-aligned, covering [key_begin, key_end)) become
// weights p = 2^(s - m'), stored times p_scale (1, or 2^112 for values read as scaled halves); keys outside
// [first, last] get p = 0. Returns m; *l = sum of p.
float row_softmax(const DecodeBlock& blk, int32_t r, int32_t base, int32_t g0, int32_t g1, float p_scale, float* row, float* l,
                  const simd::Exp2Constants& ek, const simd::TanhConstants& tk) {
  const int32_t first = std::max(blk.visible[r].first, blk.key_begin);
  const int32_t last = std::min(blk.visible[r].last, blk.key_end - 1);
  if (blk.softcap_in != 0.0f) {
    const VecF cap_in(blk.softcap_in), cap_out(blk.softcap_out);
    for (int32_t j = g0; j < g1; j += kLanes)
      (cap_out * simd::tanh(VecF::load_aligned(row + j) * cap_in, tk)).store_aligned(row + j);
  }
  const VecF scale(blk.softcap_in != 0.0f ? 1.0f : blk.score_scale);
  const bool alibi = blk.alibi != nullptr;
  const VecF slope(alibi ? blk.alibi[r] : 0.0f);
  const VecI lane_offsets{0, 1, 2, 3};
  const VecI vfirst(first - base), vlast(last - base);
  const VecI vposition(alibi ? blk.position[r] - base : 0);
  VecF vmax(kNegInf);
  for (int32_t j = g0; j < g1; j += kLanes) {
    const VecI lane = VecI(j) + lane_offsets;
    VecF x = VecF::load_aligned(row + j) * scale;
    if (alibi) x -= slope * xsimd::abs(xsimd::to_float(vposition - lane));
    const auto hidden = (lane < vfirst) | (lane > vlast);
    x = xsimd::select(xsimd::batch_bool<float>(_mm_castsi128_ps(hidden.data)), VecF(kNegInf), x);
    x.store_aligned(row + j);
    vmax = simd::pseudo_max(vmax, x);
  }
  alignas(16) float lanes[kLanes];
  vmax.store_aligned(lanes);
  const float m = std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
  const VecF m_sub(m == kNegInf ? 0.0f : m);  // nothing visible: -inf - 0 stays -inf, p = 0
  const VecF stored_scale(p_scale);
  VecF sum(0.0f);
  for (int32_t j = g0; j < g1; j += kLanes) {
    const VecF p = simd::exp2_nonpositive(VecF::load_aligned(row + j) - m_sub, ek);
    (p * stored_scale).store_aligned(row + j);
    sum += p;
  }
  *l = xsimd::hadd(sum);
  return m;
}

MHA_PHASE void block_softmax(const DecodeBlock& blk, int32_t base, float p_scale, float* s) {
  const simd::Exp2Constants ek;
  const simd::TanhConstants tk;
  const int32_t g0 = (blk.key_begin - base) / kLanes * kLanes;
  const int32_t g1 = round_up_to(blk.key_end - base, kLanes);
  for (int32_t r = 0; r < blk.rows; ++r) blk.m[r] = row_softmax(blk, r, base, g0, g1, p_scale, s + r * kS, blk.l + r, ek, tk);
}

// Phase 4: o = p V over keys [key_begin, key_end), tile by tile (tiles end on panel boundaries). stage:
// as block_scores, per V tile.
template <class Ld>
MHA_PHASE void block_values(const DecodeBlock& blk, int32_t base, const float* s, float* v_stage, const Ld& ld, bool stage) {
  using Elem = typename Ld::Elem;
  const int32_t dh8 = blk.dh8;
  std::fill(blk.o, blk.o + int64_t{blk.rows} * dh8, 0.0f);
  // One row (run_f16), read directly: all keys in one sweep, then lane order. Tried against this
  // (interleaved A/B, decode-mha-8k f16, 600 rounds in 3 runs): 8 keys per pv_keys 0.94-0.96x; 32 lanes in
  // registers over all keys (pv_micro<1, 4>) 0.99-1.00x; the K pass touching only the first half of V and
  // this one the rest 0.92-0.93x; this one touching the next block's K panels 0.65x.
  if constexpr (kPairs<Ld>) {
    const Elem* v = static_cast<const Elem*>(blk.value_rows) + int64_t{blk.key_begin} * dh8;
    pv_rows<1>(s + (blk.key_begin - base), v, dh8, blk.key_end - blk.key_begin, blk.o, ld);
    for (int32_t c = 0; c < dh8; c += 8) store_pairs(VecF::load_aligned(blk.o + c), VecF::load_aligned(blk.o + c + kLanes), blk.o + c);
    return;
  }
  const F32Loader widened;
  for (int32_t t0 = blk.key_begin; t0 < blk.key_end;) {
    const int32_t t1 = std::min(blk.key_end, (t0 / kP + 1) * kP);
    const int32_t nk = t1 - t0;
    const Elem* v = static_cast<const Elem*>(blk.value_rows) + int64_t{t0} * dh8;
    const float* p = s + (t0 - base);
    if (stage) {
      widen_rows(v, nk, dh8, dh8 / 8, v_stage, ld);
      pv_chunks(blk, p, v_stage, nk, widened);
    } else {
      pv_chunks(blk, p, v, nk, ld);
    }
    t0 = t1;
  }
}

// The four phases with the loaders of scores (KLd) and values (VLd). stage_k / stage_v: each K panel /
// V tile is first read once, in address order, into an L1 scratch tile (copied, or widened from halves),
// and the micro-kernels run on that; without it they read the cache directly. touch: the block is first
// read into L2 (touch_block; timed with the scores by the phases harness).
template <class KLd, class VLd>
void run_phases(const DecodeBlock& blk, float* scratch, bool stage_k, bool stage_v, bool fold_q, float p_scale, bool touch = false) {
  const Layout lay = make_layout(blk.head_dim);
  const int32_t base = blk.key_begin / kP * kP;
  const KLd kld;
  const VLd vld;
  if (MHA_RUN_PHASE(1)) pack_q(blk, fold_q ? f16::kWidenScale : 1.0f, scratch + lay.q);
  if (MHA_RUN_PHASE(2) && touch) {  // the stored value keeps the loads
    *reinterpret_cast<int32_t*>(scratch + lay.k_stage) = touch_block<typename KLd::Elem>(blk, base);
  }
  if (MHA_RUN_PHASE(2)) block_scores(blk, base, scratch + lay.q, scratch + lay.s, scratch + lay.k_stage, kld, stage_k);
  if (MHA_RUN_PHASE(4)) {
    block_softmax(blk, base, p_scale, scratch + lay.s);
  } else {
    std::fill(blk.m, blk.m + blk.rows, 0.0f), std::fill(blk.l, blk.l + blk.rows, 1.0f);  // a finite partial
  }
  if (MHA_RUN_PHASE(8)) {
    block_values(blk, base, scratch + lay.s, scratch + lay.v_stage, vld, stage_v);
  } else {
    std::fill(blk.o, blk.o + int64_t{blk.rows} * blk.dh8, 0.0f);
  }
}

// Staging: a chunk of 2 or more rows reads a panel in 2 to 4 strided sweeps (8 or 16 keys per pass) and
// a V tile in one sweep per 8 lanes; straight from memory, each sweep starts with a run of misses (the
// rows of decode-gqa-4k ran at 4 GB/s and 8 GFLOP/s, neither bound; float32 items of 3 or more rows now
// read the block into L2 first instead, see run). One row (the memory-bound MHA
// step) reads whole panel rows per step, and 1- or 2-row chunks read value rows whole (pv_rows): those
// read the cache directly. float16 read directly is widened in registers, its 2^112 folded into q (when
// |q| <= kMaxFoldableQ) and into the stored weights. float16 with 3 or more rows and such q: a single
// chunk (G = 4) reads each half panel row (one 64-byte line) directly, in 4 sweeps that are each one
// line per step, and staged tiles are widened without the multiply by 2^112 (interleaved A/B, 250
// rounds, loaded machine: decode-gqa-4k f16 1.13x median, decode-mqa-8k f16 1.00x, decode-b4 f16 1.12x).
// The loaders skip the widening's inf/NaN fix-up: blocks over such halves take the scalar kernel (below).
// One row reads both K and V through F16PairLoader (even/odd halves, no interleaves): interleaved A/B in
// wasm against load8, decode-mha-8k, 1 thread, loaded machine: 1.14x median of 40 rounds, 1.06x and 1.07x
// of 300 (76%, 84% of them faster); f32 unchanged (1.00-1.01x). Staged V tiles of 3 or more rows widened
// through F16PairLoader too (o put back in lane order once, at the end of the block): 0.98x on
// decode-gqa-4k, decode-mqa-8k and decode-b4 f16 (40 rounds each).
// Two cold cases go to the scalar kernel, so that every SIMD module carries only the loaders above
// (issue #15's package size: 4 kB gzipped for the inf/NaN variants, 2 kB for the unscaled one): blocks
// over inf/NaN halves (a float16 cache holds them only after a non-finite k/v or one past 65504), and q
// that cannot take the 2^112 (some |q| > kMaxFoldableQ, or not finite: such q overflows float32 scores
// against any but tiny keys). Folded, the scores and the weighted values are the same products as
// unscaled ones (scaling by 2^112 and 2^-112 is exact), so rows of 2 or more give the bits they gave
// through the unscaled loader. The choice depends on the cache and the rows' q only, never on the thread
// count, so the bits stay the same for every count. (decode.cpp sizes each worker's scratch for both.)
void run_f16(const DecodeBlock& blk, float* scratch) {
  using Scaled = F16Loader<false, true>;
  if (blk.specials || !q_foldable(blk)) return scalar::kDecodeKernel.run(blk, scratch);
  if (blk.rows > 2) return run_phases<Scaled, Scaled>(blk, scratch, blk.rows > kChunk, true, true, f16::kWidenScale);
  if (blk.rows == 2) return run_phases<Scaled, Scaled>(blk, scratch, true, false, true, f16::kWidenScale);
  run_phases<F16PairLoader, F16PairLoader>(blk, scratch, false, false, true, f16::kWidenScale);
}

size_t scratch_floats(int32_t head_dim) { return make_layout(head_dim).total; }

// float32 items of 3 or more rows (G >= 3 heads per KV head, or several queries) are about balanced or
// compute-bound: 4 * rows flops per 8 bytes of K and V, 1.5 flops a byte or more, against a mul+add
// ceiling over the streaming bandwidth of 49 / 28 = 1.75 on a Zen 4 EPYC. Read into L2 first
// (touch_block), their panels and tiles are read directly by every chunk, unstaged: once in L2, a staged
// copy cost more than the strided sweeps it saved. Interleaved A/B in wasm against the staged tiles, whose copies were
// pipelined into the previous tile's micro-kernels (EPYC Zen 4, 1 thread, 30-40 rounds): decode-gqa-4k
// f32 1.20-1.28x median per round, decode-mqa-8k f32 1.13x, decode-b4 f32 1.10-1.15x. The same touch
// before the float16 paths: gqa-4k 0.98x, b4 0.87x (their passes are bound by the widening's
// instructions), and touching only a float16 block's V rows before they are widened: 0.88-1.03x.
// Touching each panel and tile just before its micro-kernels instead of the whole block: no better
// (gqa-4k f32 1.29x, f16 0.95x); touching them again, from L2 into L1, after the block: 0.96-1.00x.
// Reading ahead inside the micro-kernels instead, so that the stream overlaps the arithmetic (only the
// block's first K panel touched first; then the first chunk's 4 QK^T calls of each panel read one line a
// step, as many lines as the next K panel and the panel's V tile hold): gqa-4k f32 0.92-0.93x, b4
// 0.88-0.91x (40 rounds, 2 runs each; Zen 4 EPYC), mqa-8k 0.96-0.99x against the kernel before the
// chunk-strip order (qk_chunks), which alone had given it 1.04-1.11x.
void run(const DecodeBlock& blk, float* scratch) {
  if (blk.dtype == CacheDType::kFloat32 && blk.rows > 2) return run_phases<F32Loader, F32Loader>(blk, scratch, false, false, false, 1.0f, true);
  if (blk.dtype == CacheDType::kFloat32) return run_phases<F32Loader, F32Loader>(blk, scratch, blk.rows > 1, false, false, 1.0f);
  run_f16(blk, scratch);
}

}  // namespace

const DecodeKernel kDecodeKernel{"simd128", &scratch_floats, &run};

}  // namespace simd128
}  // namespace mha
