// The simd128 variant's packing routines and micro-kernels (xsimd on 4-lane f32 vectors: SSE4.2 natively,
// WebAssembly SIMD128 when compiled with Emscripten). Included only by kernel_simd128.cpp, which is
// compiled with the SIMD flags; kept apart so that the driver there reads as its phases. The relaxed
// variant is the same code in namespace mha::relaxed, where simd::madd is one relaxed_madd.
//
// Addressing matters as much as arithmetic here: V8 addresses wasm memory as [base + index + imm], so
// every distinct computed address costs an extra lea. The scratch strides are compile-time constants
// (kTileStride) and the Q block is packed as kMr-row panels (d-major, the rows' values adjacent), so
// each micro-kernel step reads all its operands from one or two pointers with immediate offsets.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>

#include <xsimd/xsimd.hpp>

#include "mha/core/numeric.hpp"
#include "mha/simd/simd_exp.hpp"
#include "mha/simd/simd_tanh.hpp"
#include "mha/simd/simd_transpose.hpp"
#include "mha/core/visibility.hpp"

#ifdef MHA_PROFILE_NOINLINE  // profiling builds only: keeps each phase a separate function for perf
#define MHA_PHASE __attribute__((noinline))
#else
#define MHA_PHASE
#endif

namespace mha {
namespace MHA_SIMD_VARIANT {

using simd::madd;
using simd::transpose_4x4;
using simd::VecF;
using simd::VecI;
using simd::zip_hi_pairs;
using simd::zip_lo_pairs;
constexpr int32_t kLanes = 4;  // f32x4: SSE4.2 natively, SIMD128 in wasm
static_assert(VecF::size == kLanes, "the micro-kernels are written for 4-lane vectors");

// Query rows per micro-kernel (a Q panel): 4 rows x 8 keys, 8 accumulators, in both variants. Without
// FMA each step also needs a product temporary, and 4 rows are the largest block that does not spill.
// With FMA (a multiply-add of 4 cycles' latency, 2 started a cycle) 8 chains are just enough; more rows
// (6: 12 accumulators + 2 key vectors + 1 broadcast = 15 of the 16 xmm registers) fit only where the
// engine keeps the wasm's order, each row's broadcast just before its two multiply-adds, and engines
// that load all broadcasts first spill accumulators. So 4 rows in every variant and engine.
constexpr int32_t kMr = 4;
// Query rows are padded to whole panels and to whole vectors of 4 rows (the online softmax updates the
// running maxima of 4 rows a vector): to a multiple of both.
constexpr int32_t kRowPad = std::lcm(kMr, kLanes);
constexpr int32_t kNr = 8;  // keys (QK^T) or output lanes (PV) per micro-kernel
// The largest keys per tile, and so the row stride of the K^T and score tiles: a compile-time constant,
// so that the micro-kernels address their operands with immediate offsets (see the top of this file).
constexpr int32_t kTileStride = 128;

constexpr float kLog2eFloat = static_cast<float>(kLog2e);  // float32 math in the kernel

// Before the scalar tail loops (Dh % 4 columns, padding keys, zero padding) and the score epilogue's row
// loops: LLVM -O3 would vectorize and unroll each of them, with its runtime checks, into a kilobyte of
// wasm that bert-like shapes never run.
#ifdef __clang__
#define MHA_TAIL_LOOP _Pragma("clang loop vectorize(disable) interleave(disable) unroll(disable)")
#else
#define MHA_TAIL_LOOP
#endif
// Before the loops over a block's rows: unrolled in full, so that the block stays in registers.
#ifdef __clang__
#define MHA_EACH_ROW _Pragma("clang loop unroll(full)")
#else
#define MHA_EACH_ROW
#endif

// ---------------------------------------------------------------------------------------------------
// Packing

// Rows r..r+3 (row_stride apart, Dh each) -> dst (Dh, 4 adjacent floats, kDstStride apart): dst[d *
// kDstStride + i] = row i [d]. 4x4 blocks are transposed in registers (4 unaligned row loads, 8 shuffles,
// 4 aligned stores, so dst must be 16-byte aligned and kDstStride a multiple of 4); a Dh % 4 tail goes
// scalar. Used for the Q panels (kDstStride kMr) and the K^T tile (kDstStride kTileStride).
template <int32_t kDstStride>
inline void transpose_4_rows(const float* r0, int64_t row_stride, int32_t dh, float* dst) {
  const float* r1 = r0 + row_stride;
  const float* r2 = r1 + row_stride;
  const float* r3 = r2 + row_stride;
  const int32_t dh4 = dh - dh % kLanes;
  for (int32_t d = 0; d < dh4; d += kLanes) {
    VecF x0 = VecF::load_unaligned(r0 + d), x1 = VecF::load_unaligned(r1 + d);
    VecF x2 = VecF::load_unaligned(r2 + d), x3 = VecF::load_unaligned(r3 + d);
    transpose_4x4(x0, x1, x2, x3);
    x0.store_aligned(dst + (d + 0) * kDstStride);
    x1.store_aligned(dst + (d + 1) * kDstStride);
    x2.store_aligned(dst + (d + 2) * kDstStride);
    x3.store_aligned(dst + (d + 3) * kDstStride);
  }
  MHA_TAIL_LOOP
  for (int32_t d = dh4; d < dh; ++d) {
    dst[d * kDstStride + 0] = r0[d];
    dst[d * kDstStride + 1] = r1[d];
    dst[d * kDstStride + 2] = r2[d];
    dst[d * kDstStride + 3] = r3[d];
  }
}

// Query rows [0, rows) (row_stride apart) -> panels of kMr rows, qp[(r/kMr)*Dh*kMr + d*kMr + r%kMr]; rows
// [rows, round_up(rows, kRowPad)) are zero (their results are discarded). Whole panels go through
// transposes, a last partial panel element by element.
MHA_PHASE inline void pack_q_panels(const float* q, int64_t row_stride, int32_t rows, int32_t dh, float* qp) {
  static_assert(kMr == kLanes, "whole panels are 4x4 transposes");
  const int32_t padded_rows = round_up(rows, kRowPad);
  const int32_t whole = rows - rows % kMr;  // rows in whole panels
  for (int32_t r = 0; r < whole; r += kMr) transpose_4_rows<kMr>(q + r * row_stride, row_stride, dh, qp + r * dh);
  for (int32_t r = whole; r < padded_rows; ++r) {
    float* panel = qp + (r / kMr) * dh * kMr + r % kMr;
    if (r < rows) {
      const float* src = q + r * row_stride;
      MHA_TAIL_LOOP
      for (int32_t d = 0; d < dh; ++d) panel[d * kMr] = src[d];
    } else {
      MHA_TAIL_LOOP
      for (int32_t d = 0; d < dh; ++d) panel[d * kMr] = 0.0f;
    }
  }
}

// K rows [0, nk) of the tile -> kt as panels of 8 keys, kt[(j/8)*Dh*8 + d*8 + j%8]; keys
// [nk, round_up(nk, kNr)) are zero.
MHA_PHASE inline void pack_k_transposed(const float* k, int64_t row_stride, int32_t nk, int32_t dh, float* kt) {
  const int32_t nk8 = round_up(nk, kNr);
  const int32_t nk4 = nk - nk % kLanes;
  auto at = [kt, dh](int32_t j, int32_t d) { return kt + (j / kNr) * dh * kNr + d * kNr + j % kNr; };
  for (int32_t j = 0; j < nk4; j += kLanes) transpose_4_rows<kNr>(k + j * row_stride, row_stride, dh, at(j, 0));
  MHA_TAIL_LOOP
  for (int32_t j = nk4; j < nk; ++j) {
    const float* src = k + j * row_stride;
    MHA_TAIL_LOOP
    for (int32_t d = 0; d < dh; ++d) *at(j, d) = src[d];
  }
  MHA_TAIL_LOOP
  for (int32_t j = nk; j < nk8; ++j) {
    MHA_TAIL_LOOP
    for (int32_t d = 0; d < dh; ++d) *at(j, d) = 0.0f;
  }
}

// V rows [0, nk) of the tile -> vp as panels of 8 lanes, vp[(d/8)*nk*8 + j*8 + d%8]; lanes [dh, dh8) zero.
MHA_PHASE inline void pack_v(const float* v, int64_t row_stride, int32_t nk, int32_t dh, int32_t dh8, float* vp) {
  const int32_t dh4 = dh - dh % kLanes;
  const int64_t panel = int64_t{nk} * kNr;
  for (int32_t j = 0; j < nk; ++j) {
    const float* src = v + j * row_stride;
    float* dst = vp + j * kNr;
    int32_t d = 0;
    for (; d < dh4; d += kLanes) VecF::load_unaligned(src + d).store_aligned(dst + (d / kNr) * panel + d % kNr);
    MHA_TAIL_LOOP
    for (; d < dh; ++d) dst[(d / kNr) * panel + d % kNr] = src[d];
    MHA_TAIL_LOOP
    for (; d < dh8; ++d) dst[(d / kNr) * panel + d % kNr] = 0.0f;
  }
}

// ---------------------------------------------------------------------------------------------------
// Micro-kernels

// What qk_tile does to a block of a panel's scores right after the dot products, while the block is in L1
// (docs/spec.md 2.4, in log2 units): x = scale * q.k, then softcap s = c*log2(e) * tanh(x) (scale is then
// scale/c), ALiBi s -= slope*log2(e) * |p - j|, bias s += log2(e) * bias[b, h, i, j]. No second pass over
// the score rows.
struct ScoreEpilogue {
  float scale = 0.0f;  // x = scale * q.k: scale*log2(e), or scale/c with softcap
  bool softcap = false;
  float softcap_scale = 0.0f;  // c*log2(e)
  bool alibi = false;
  float alibi_slope = 0.0f;          // slope[h]*log2(e)
  int32_t first_position = 0;        // position of the panel's row 0 (query_offset + i)
  int32_t first_key = 0;             // j0, the tile's first key
  const float* bias_rows[kMr] = {};  // bias[b, h, i_r, j0], or all nullptr
  int32_t nk = 0;                    // keys in the tile: bias is read for keys [0, nk) only
  const simd::TanhConstants* tanh = nullptr;
};

alignas(16) inline constexpr int32_t kLaneIndex[kLanes] = {0, 1, 2, 3};

// Zeros standing in for the bias rows of the padding rows of a panel (rows past the unit's last row).
alignas(16) inline constexpr float kZeroBiasRow[kTileStride] = {};

// The bias values of a row from tile key `key` that lie before nk, then zeros (the tile's last, partial
// vector of keys): out of line, so that load_bias in the score epilogue stays one load.
__attribute__((noinline)) inline VecF load_bias_tail(const float* row, int32_t key, int32_t nk) {
  alignas(16) float tail[kLanes] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int32_t l = 0; key + l < nk; ++l) tail[l] = row[key + l];
  return VecF::load_aligned(tail);
}

// 4 bias values of a row from tile key `key`: keys at or past nk (the padding keys of the tile) read 0,
// so nothing past the end of the bias row is read.
inline VecF load_bias(const float* row, int32_t key, int32_t nk) {
  if (key + kLanes <= nk) return VecF::load_unaligned(row + key);
  return load_bias_tail(row, key, nk);
}

// The full tanh on a block's stored scores (the rare branch of score_epilogue_block, kept out of line so
// that its exp2 and division are not inlined into the micro-kernel).
__attribute__((noinline)) inline void softcap_block_full(float* s, const ScoreEpilogue& ep) {
  const VecF cap(ep.softcap_scale);
  for (int32_t r = 0; r < kMr; ++r) {
    for (int32_t x = 0; x < kNr; x += kLanes) {
      (simd::tanh(VecF::load_aligned(s + r * kTileStride + x), *ep.tanh) * cap).store_aligned(s + r * kTileStride + x);
    }
  }
}

// ALiBi and bias for the 4 scores of panel row `row` at tile keys [key, key + 4).
inline VecF score_epilogue(VecF x, int32_t row, int32_t key, const ScoreEpilogue& ep) {
  if (ep.alibi) {
    const VecI keys = VecI(ep.first_key + key) + VecI::load_aligned(kLaneIndex);
    // Unsigned, wrapping: a panel's padding rows (past the unit's last row) may lie past position 2^31 - 1
    // when queryOffset + seqLen is close to it; their scores are never used, but a signed overflow is UB.
    const int32_t position =
        static_cast<int32_t>(static_cast<uint32_t>(ep.first_position) + static_cast<uint32_t>(row));
    const VecF distance = xsimd::to_float(xsimd::abs(VecI(position) - keys));
    x -= VecF(ep.alibi_slope) * distance;
  }
  if (ep.bias_rows[0] != nullptr) x += VecF(kLog2eFloat) * load_bias(ep.bias_rows[row], key, ep.nk);
  return x;
}

// The score epilogue of one block, in place on its stored scores (rows kTileStride apart from s, tile keys
// [jb, jb + 8)): softcap c*log2(e) * tanh(x), then ALiBi and bias. On the stored block (in L1) rather
// than on registers, so that its code exists once instead of once per accumulator (issue #15's size
// budget). Softcap: logits far below the cap (the common case: Gemma 2 caps at 50 and 30) leave every |x|
// below 0.625, where tanh is its polynomial alone: one test per block skips the exp2 and the division of
// the other branch.
inline void score_epilogue_block(float* s, int32_t jb, const ScoreEpilogue& ep) {
  if (ep.softcap) {
    const simd::TanhConstants& k = *ep.tanh;
    VecF largest(0.0f);
    MHA_TAIL_LOOP
    for (int32_t r = 0; r < kMr; ++r) {
      const VecF x0 = VecF::load_aligned(s + r * kTileStride), x1 = VecF::load_aligned(s + r * kTileStride + kLanes);
      largest = simd::pseudo_max(largest, simd::pseudo_max(xsimd::abs(x0), xsimd::abs(x1)));
    }
    // A NaN lane may pass or fail the test: both branches keep it (and its row is redone by the reference).
    if (xsimd::all(largest < k.small)) {
      const VecF cap(ep.softcap_scale);
      MHA_TAIL_LOOP
      for (int32_t r = 0; r < kMr; ++r) {
        float* row = s + r * kTileStride;
        (simd::tanh_small(VecF::load_aligned(row), k) * cap).store_aligned(row);
        (simd::tanh_small(VecF::load_aligned(row + kLanes), k) * cap).store_aligned(row + kLanes);
      }
    } else {
      softcap_block_full(s, ep);
    }
  }
  if (!ep.alibi && ep.bias_rows[0] == nullptr) return;
  MHA_TAIL_LOOP
  for (int32_t r = 0; r < kMr; ++r) {
    float* row = s + r * kTileStride;
    score_epilogue(VecF::load_aligned(row), r, jb, ep).store_aligned(row);
    score_epilogue(VecF::load_aligned(row + kLanes), r, jb + kLanes, ep).store_aligned(row + kLanes);
  }
}

// One micro-kernel block on registers: kMr rows x 8 keys (QK^T) or 8 output lanes (PV), 2 vectors a row.
using Block = VecF[kMr][2];

// a[r] += p[r * kStride] * (x0, x1) for the block's rows.
template <int32_t kStride>
inline void madd_rows(const float* p, VecF x0, VecF x1, Block& a) {
  VecF b[kMr];
  MHA_EACH_ROW
  for (int32_t r = 0; r < kMr; ++r) b[r] = VecF(p[r * kStride]);
  MHA_EACH_ROW
  for (int32_t r = 0; r < kMr; ++r) {
    a[r][0] = madd(b[r], x0, a[r][0]);
    a[r][1] = madd(b[r], x1, a[r][1]);
  }
}

// x[0] = x[0] op x[1] op ... op x[n-1] as a balanced tree ((x0 op x1) op (x2 op x3)) op ...: n - 1
// operations, log2(n) deep.
template <int32_t n, class Op>
inline VecF tree_reduce(VecF (&x)[n], Op op) {
  MHA_EACH_ROW
  for (int32_t width = 1; width < n; width *= 2) {
    MHA_EACH_ROW
    for (int32_t r = 0; r + width < n; r += 2 * width) x[r] = op(x[r], x[r + width]);
  }
  return x[0];
}

// row_max[r] = the largest lane of maxima[r], for the kMr = 4 rows: two rounds of shuffles and maxima over
// the 4 rows at once.
inline void store_row_maxima(const VecF (&maxima)[kMr], float* row_max) {
  static_assert(kMr == kLanes, "the rows' maxima are one vector");
  const VecF m01 =
      simd::pseudo_max(xsimd::zip_lo(maxima[0], maxima[1]), xsimd::zip_hi(maxima[0], maxima[1]));  // rows 0 1 0 1
  const VecF m23 =
      simd::pseudo_max(xsimd::zip_lo(maxima[2], maxima[3]), xsimd::zip_hi(maxima[2], maxima[3]));  // rows 2 3 2 3
  simd::pseudo_max(zip_lo_pairs(m01, m23), zip_hi_pairs(m01, m23)).store_aligned(row_max);
}

// s[i][jb..jb+8) = scale * (q_i . k_j) for the kMr rows of one Q panel (Dh, kMr) and keys [0, nk8) of the
// K^T tile (Dh, kTileStride), then (kEpilogue) the score epilogue. Returns true when some scaled
// q.k is +-inf or NaN (q.k overflowed float32, or an input is not finite): checked here, on registers,
// at 9 operations per 32 scores instead of a pass over each row (a sum of finite scores that overflows
// only costs a needless, exact, recomputation). The check comes before the epilogue, whose -inf from a
// bias hides a key legitimately.
// With row_max, also row_max[0..kMr) = each row's largest score (the caller asks only when no key of the
// tile is hidden or padding): 2 maxima per row and 8 keys here, on registers already loaded, instead of
// a second pass over the stored rows.
// Registers: see kMr.
template <bool kEpilogue>
MHA_PHASE inline bool qk_tile(const float* qpanel, int32_t dh, const float* kt, int32_t nk8, const ScoreEpilogue& ep,
                              float* s, float* row_max) {
  const VecF vscale(ep.scale);
  VecF nonfinite(0.0f);  // stays 0 unless a score is not finite (0 * inf = NaN)
  VecF maxima[kMr];      // lane-wise maxima of the rows
  MHA_EACH_ROW
  for (int32_t r = 0; r < kMr; ++r) maxima[r] = VecF(kNegInf);
  for (int32_t jb = 0; jb < nk8; jb += kNr) {
    Block a;
    MHA_EACH_ROW
    for (int32_t r = 0; r < kMr; ++r) a[r][0] = a[r][1] = VecF(0.0f);
    const float* qp = qpanel;
    const float* kp = kt + jb * dh;  // the panel of keys [jb, jb + 8)
    // Not unrolled: LLVM would hoist the second step's loads above the first step's arithmetic, and
    // the extra live vectors spill in V8.
    for (int32_t d = 0; d < dh; ++d, qp += kMr, kp += kNr) {
      const VecF k0 = VecF::load_aligned(kp);
      const VecF k1 = VecF::load_aligned(kp + kLanes);
      madd_rows<1>(qp, k0, k1, a);
    }
    VecF row_sums[kMr];
    MHA_EACH_ROW
    for (int32_t r = 0; r < kMr; ++r) {
      a[r][0] *= vscale, a[r][1] *= vscale;
      row_sums[r] = a[r][0] + a[r][1];
    }
    nonfinite = madd(tree_reduce(row_sums, [](VecF x, VecF y) { return x + y; }), VecF(0.0f), nonfinite);
    MHA_EACH_ROW
    for (int32_t r = 0; r < kMr; ++r) {
      a[r][0].store_aligned(s + r * kTileStride + jb);
      a[r][1].store_aligned(s + r * kTileStride + jb + kLanes);
    }
    if constexpr (kEpilogue) {
      score_epilogue_block(s + jb, jb, ep);
      if (row_max != nullptr) {  // the maxima are of the final scores
        MHA_EACH_ROW
        for (int32_t r = 0; r < kMr; ++r) {
          a[r][0] = VecF::load_aligned(s + r * kTileStride + jb);
          a[r][1] = VecF::load_aligned(s + r * kTileStride + jb + kLanes);
        }
      }
    }
    if (row_max != nullptr) {
      MHA_EACH_ROW
      for (int32_t r = 0; r < kMr; ++r) maxima[r] = simd::pseudo_max(maxima[r], simd::pseudo_max(a[r][0], a[r][1]));
    }
  }
  if (row_max != nullptr) store_row_maxima(maxima, row_max);
  return xsimd::hadd(nonfinite) != 0.0f;
}

// o[0..kMr)[0..dh8) = o * alpha + p[0..kMr)[0..nk) @ v[0..nk): kMr rows x 8 output lanes per pass over
// the key tile; p rows are kTileStride apart, packed v and o rows dh8 apart. The rescale by alpha is
// folded into loading the accumulators.
MHA_PHASE inline void pv_tile(const float* p, const float* v, int32_t dh8, int32_t nk, const float* alpha, float* o) {
  VecF al[kMr];
  MHA_EACH_ROW
  for (int32_t r = 0; r < kMr; ++r) al[r] = VecF(alpha[r]);
  for (int32_t d = 0; d < dh8; d += kNr) {
    Block a;
    MHA_EACH_ROW
    for (int32_t r = 0; r < kMr; ++r) {
      a[r][0] = VecF::load_aligned(o + r * dh8 + d) * al[r];
      a[r][1] = VecF::load_aligned(o + r * dh8 + d + kLanes) * al[r];
    }
    const float* vp = v + d * nk;  // the panel of lanes [d, d + 8)
    const float* pp = p;
    for (int32_t j = 0; j < nk; ++j, ++pp, vp += kNr) {
      const VecF v0 = VecF::load_aligned(vp);
      const VecF v1 = VecF::load_aligned(vp + kLanes);
      madd_rows<kTileStride>(pp, v0, v1, a);
    }
    MHA_EACH_ROW
    for (int32_t r = 0; r < kMr; ++r) {
      a[r][0].store_aligned(o + r * dh8 + d);
      a[r][1].store_aligned(o + r * dh8 + d + kLanes);
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Row helpers of the online softmax. Scores are in log2 units: s = scale*log2(e) * q.k.

// Keys of the tile outside `keys` (tile-relative, the row's visible range by length, causality and
// window), keys whose mask byte is 0 (mask: the row's bytes from the tile's first key, or nullptr) and
// the padding keys [nk, nk8) become -inf; returns the row's largest score of the tile. A NaN score is
// dropped by the max or kept (when first); either way its row is poisoned by the nonfinite check of
// qk_tile.
MHA_PHASE inline float hide_and_max_row(float* s, int32_t nk, int32_t nk8, KeyRange keys, const uint8_t* mask) {
  const int32_t begin = std::max(keys.begin, 0);
  const int32_t end = std::max(std::min(keys.end, nk), begin);
  for (int32_t j = 0; j < begin; ++j) s[j] = kNegInf;
  for (int32_t j = end; j < nk8; ++j) s[j] = kNegInf;
  if (mask != nullptr) {
    for (int32_t j = begin; j < end; ++j) {
      if (mask[j] == 0) s[j] = kNegInf;
    }
  }
  VecF vmax0 = VecF::load_aligned(s), vmax1 = VecF::load_aligned(s + kLanes);
  for (int32_t j = kNr; j < nk8; j += kNr) {
    vmax0 = simd::pseudo_max(vmax0, VecF::load_aligned(s + j));
    vmax1 = simd::pseudo_max(vmax1, VecF::load_aligned(s + j + kLanes));
  }
  alignas(16) float lanes[kLanes];
  simd::pseudo_max(vmax0, vmax1).store_aligned(lanes);
  return std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
}

// 4 rows: m_new = max(m, tile_max); m_sub = m_new, or 0 while nothing is visible (so that -inf - m_sub
// stays -inf instead of NaN); alpha = 2^(m_old - m_sub), the rescale of the rows' sums and accumulators.
MHA_PHASE inline void update_running_max(const float* tile_max, float* m, float* m_sub, float* alpha,
                                         const simd::Exp2Constants& ek) {
  const VecF m_old = VecF::load_unaligned(m);
  const VecF m_new = simd::pseudo_max(m_old, VecF::load_unaligned(tile_max));
  const VecF sub = xsimd::select(m_new == VecF(kNegInf), VecF(0.0f), m_new);
  m_new.store_unaligned(m);
  sub.store_unaligned(m_sub);
  simd::exp2_nonpositive(m_old - sub, ek).store_unaligned(alpha);
}

// s (nk8 floats, 16-byte aligned) -> p = 2^(s - m_sub) (0 where hidden); returns the sum of p.
MHA_PHASE inline float exp_row(float* s, int32_t nk8, float m_sub, const simd::Exp2Constants& ek) {
  const VecF vm(m_sub);
  VecF vsum0(0.0f), vsum1(0.0f);
  for (int32_t j = 0; j < nk8; j += kNr) {
    const VecF p0 = simd::exp2_nonpositive(VecF::load_aligned(s + j) - vm, ek);
    const VecF p1 = simd::exp2_nonpositive(VecF::load_aligned(s + j + kLanes) - vm, ek);
    p0.store_aligned(s + j);
    p1.store_aligned(s + j + kLanes);
    vsum0 += p0;
    vsum1 += p1;
  }
  return xsimd::hadd(vsum0 + vsum1);
}

}  // namespace MHA_SIMD_VARIANT
}  // namespace mha
