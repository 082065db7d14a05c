// The SIMD decode kernel's loaders and micro-kernels (xsimd on 4-lane f32 vectors: SSE4.2 natively,
// WebAssembly SIMD128 with Emscripten). Included only by decode_simd128.cpp, inside its variant's
// namespace, which drives them through the four phases of a work item; kept apart so that the driver
// there reads as those phases.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "mha/decode/decode_kernel.hpp"
#include "mha/core/f16.hpp"
#include "mha/simd/simd_exp.hpp"

namespace mha {
namespace MHA_SIMD_VARIANT {
namespace {  // one translation unit per variant includes this

using simd::madd;  // mul + add; one relaxed_madd in the relaxed variant
using simd::VecF;
using simd::VecI;
constexpr int32_t kLanes = 4;
static_assert(VecF::size == kLanes, "the micro-kernels are written for 4-lane vectors");
constexpr int32_t kS = kDecodeMaxKeysPerBlock;  // row stride of the scores (a constant: immediate offsets)
constexpr int32_t kChunk = 4;                   // rows per micro-kernel call
constexpr int32_t kMaxChunks = kDecodeMaxRowsPerItem / kChunk;
// The panel width, kKeysPerPanel (kv_cache.hpp), is also the keys of a PV tile: one name for both.

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
  void load8(const uint16_t* p, VecF& lo, VecF& hi) const {
    f16::simd::load8<kSpecials, kScaled>(p, lo, hi, constants);
  }
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
    const VecI x = VecI::load_aligned(reinterpret_cast<const int32_t*>(p));
    even = xsimd::bitwise_cast<VecF>(((x << 16) >> 3) & keep_sign_and_magnitude);  // arithmetic shifts
    odd = xsimd::bitwise_cast<VecF>((x >> 3) & keep_sign_and_magnitude);
  }
};
// bfloat16 (the upper halves of float32s) for the one-row step: per 32-bit lane, the upper element is the lane
// with its low 16 bits cleared and the lower one the lane shifted up by 16, 1 operation per 4 values and
// exact, in F16PairLoader's even/odd order.
struct BF16PairLoader {
  using Elem = uint16_t;
  VecI keep_upper = VecI(static_cast<int32_t>(0xffff0000u));
  BF16PairLoader() { mha::simd::pin_in_register(keep_upper); }
  void load8(const uint16_t* p, VecF& even, VecF& odd) const {
    const VecI x = VecI::load_aligned(reinterpret_cast<const int32_t*>(p));
    even = xsimd::bitwise_cast<VecF>(x << 16);
    odd = xsimd::bitwise_cast<VecF>(x & keep_upper);
  }
};
// bfloat16 in element order (staged panels and tiles of 2+ rows): each element interleaved above a zero
// 16-bit word, 1 shuffle per 4 values.
struct BF16Loader {
  using Elem = uint16_t;
  void load8(const uint16_t* p, VecF& lo, VecF& hi) const {
    const simd::VecU16 x = simd::VecU16::load_aligned(p);
    const simd::VecU16 zero(0);
    lo = xsimd::bitwise_cast<VecF>(xsimd::zip_lo(zero, x));
    hi = xsimd::bitwise_cast<VecF>(xsimd::zip_hi(zero, x));
  }
};
template <class Ld>
constexpr bool kPairs = std::is_same<Ld, F16PairLoader>::value || std::is_same<Ld, BF16PairLoader>::value;

// Elements 0, 2, 4, 6 in even and 1, 3, 5, 7 in odd -> 0..3 at dst, 4..7 at dst + 4.
inline void store_pairs(VecF even, VecF odd, float* dst) {
  xsimd::zip_lo(even, odd).store_aligned(dst);
  xsimd::zip_hi(even, odd).store_aligned(dst + kLanes);
}

// ---------------------------------------------------------------------------------------------------
// Micro-kernels. Loops over R, P, L have constant bounds: LLVM unrolls them and keeps the arrays in
// registers. Broadcasts are taken first and each key (or lane) group is consumed as soon as it is loaded,
// so at most R + 2 + R*2P vectors are live (<= 14 of the 16 xmm registers).

// s[r * kS + c] = q_r . k_c for rows r < R and keys c < 8P of a panel column group (row d of the panel
// group at panel + d * kKeysPerPanel). qpanel (Dh, 4).
template <int R, int P, class Ld>
inline void qk_micro(const float* qpanel, const typename Ld::Elem* panel, int32_t dh, float* s, const Ld& ld) {
  VecF acc[R][2 * P];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < 2 * P; ++x) acc[r][x] = VecF(0.0f);
  for (int32_t d = 0; d < dh; ++d, qpanel += kChunk, panel += kKeysPerPanel) {
    VecF b[R];
    for (int r = 0; r < R; ++r) b[r] = VecF(qpanel[r]);
    for (int p = 0; p < P; ++p) {
      VecF k0, k1;
      ld.load8(panel + 8 * p, k0, k1);
      for (int r = 0; r < R; ++r) {
        acc[r][2 * p] = madd(b[r], k0, acc[r][2 * p]);
        acc[r][2 * p + 1] = madd(b[r], k1, acc[r][2 * p + 1]);
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
        acc[r][2 * l] = madd(b[r], v0, acc[r][2 * l]);
        acc[r][2 * l + 1] = madd(b[r], v1, acc[r][2 * l + 1]);
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
// are then read from memory while the panel streams in, and the PV phase finds them in L2: the one-row
// step is memory-bound, and this keeps two streams in flight instead of one.
// The touches are scalar loads into touched (a general register: the xmm registers hold the sums).
template <class Ld>
inline void qk_row_touching(const float* qpanel, const typename Ld::Elem* panel, int32_t dh, float* s, const Ld& ld,
                            const char*& touch, const char* touch_last, int32_t& touched) {
  constexpr int32_t kTouchBytes = kKeysPerPanel * sizeof(typename Ld::Elem);
  VecF acc[8];
  for (int x = 0; x < 8; ++x) acc[x] = VecF(0.0f);
  for (int32_t d = 0; d < dh; ++d, qpanel += kChunk, panel += kKeysPerPanel, touch += kTouchBytes) {
    const VecF b(qpanel[0]);
    for (int p = 0; p < 4; ++p) {
      VecF k0, k1;
      ld.load8(panel + 8 * p, k0, k1);
      acc[2 * p] = madd(b, k0, acc[2 * p]);
      acc[2 * p + 1] = madd(b, k1, acc[2 * p + 1]);
    }
    for (int32_t t = 0; t < kTouchBytes; t += 64)
      touched |= *reinterpret_cast<const int32_t*>(std::min(touch + t, touch_last));
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
  for (int32_t c = 0; c < kKeysPerPanel; c += 8 * P) qk_micro<R, P>(qpanel, panel + c, dh, s + c, ld);
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
        acc[r][0] = madd(b[r][k], v0, acc[r][0]);
        acc[r][1] = madd(b[r][k], v1, acc[r][1]);
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
// One float32 row: 4 keys interleave 4 rows' cache lines (0, 4, 8, 12, 1, 5, ...) and the tile streams
// slower than with 2 (0, 4, 1, 5, ...), which is worth loading and storing o twice as often.
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
inline void qk_chunk(int32_t rows, const float* qpanel, const typename Ld::Elem* panel, int32_t dh, float* s,
                     const Ld& ld) {
  switch (rows) {
    case 1: qk_panel<1>(qpanel, panel, dh, s, ld); break;
    case 2: qk_panel<2>(qpanel, panel, dh, s, ld); break;
    case 3: qk_panel<3>(qpanel, panel, dh, s, ld); break;
    default: qk_panel<4>(qpanel, panel, dh, s, ld); break;
  }
}

template <class Ld>
inline void pv_chunk(int32_t rows, const float* p, const typename Ld::Elem* v, int32_t dh8, int32_t nk, float* o,
                     const Ld& ld) {
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
// panel (tile: 16 kB at Dh 128) again, and beside the scores and o it does not stay in L1.
inline bool whole_chunks(int32_t rows) { return rows > kChunk && rows % kChunk == 0; }

// The whole-chunk loops on float32 panels and tiles (the cache's, or staged ones widened from halves):
// out of line, so that the module holds one copy of each (inlined at every call site and for every
// loader, they added 1.2-1.5 kB zlib to each SIMD module; issue #15's size budget).
__attribute__((noinline)) void qk_whole_chunks(int32_t chunks, const float* qp, const float* panel, int32_t dh,
                                               float* s_panel) {
  const F32Loader ld;
  for (int32_t g = 0; g < kKeysPerPanel; g += 8) {
    for (int32_t c = 0; c < chunks; ++c)
      qk_micro<kChunk, 1>(qp + c * dh * kChunk, panel + g, dh, s_panel + c * kChunk * kS + g, ld);
  }
}
__attribute__((noinline)) void pv_whole_chunks(int32_t chunks, const float* p, const float* v, int32_t dh8, int32_t nk,
                                               float* o) {
  const F32Loader ld;
  for (int32_t lane = 0; lane < dh8; lane += 8) {
    for (int32_t c = 0; c < chunks; ++c)
      pv_micro<kChunk, 1>(p + c * kChunk * kS, v + lane, dh8, nk, o + c * kChunk * dh8 + lane, ld);
  }
}

// s (rows, kS) = q . k for the 32 keys of one panel (Dh, kKeysPerPanel) and every chunk of the item.
template <class Ld>
inline void qk_chunks(const DecodeBlock& blk, const float* qp, const typename Ld::Elem* panel, float* s_panel,
                      const Ld& ld) {
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
  const int32_t dh8 = blk.dv8;
  const int32_t chunks = chunk_count(blk);
  if constexpr (std::is_same<Ld, F32Loader>::value) {
    if (whole_chunks(blk.rows)) return pv_whole_chunks(chunks, p, v, dh8, nk, blk.o);
  }
  for (int32_t c = 0; c < chunks; ++c)
    pv_chunk(chunk_rows(blk, c), p + c * kChunk * kS, v, dh8, nk, blk.o + c * kChunk * dh8, ld);
}

// count rows of 8-element groups (row_stride elements apart, `groups` per row) widened into floats.
template <class Ld>
void widen_rows(const typename Ld::Elem* src, int32_t rows, int32_t row_stride, int32_t groups, float* dst,
                const Ld& ld) {
  for (int32_t i = 0; i < rows; ++i, src += row_stride, dst += row_stride) {
    for (int32_t c = 0; c < groups * 8; c += 8) {
      VecF lo, hi;
      ld.load8(src + c, lo, hi);
      lo.store_aligned(dst + c);
      hi.store_aligned(dst + c + kLanes);
    }
  }
}

}  // namespace
}  // namespace MHA_SIMD_VARIANT
}  // namespace mha
