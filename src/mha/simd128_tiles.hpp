// The simd128 variant's packing routines and micro-kernels (xsimd on 4-lane f32 vectors: SSE4.2 natively,
// WebAssembly SIMD128 when compiled with Emscripten). Included only by kernel_simd128.cpp, which is
// compiled with the SIMD flags; kept apart so that the driver there reads as its phases. The relaxed
// variant is the same code in namespace mha::relaxed, where simd::madd is one relaxed_madd.
//
// Addressing matters as much as arithmetic here: V8 addresses wasm memory as [base + index + imm], so
// every distinct computed address costs an extra lea. The scratch strides are compile-time constants
// (kTileStride) and the Q block is packed as 4-row panels (d-major, the 4 rows' values adjacent), so
// each micro-kernel step reads all its operands from one or two pointers with immediate offsets.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "mha/simd_exp.hpp"
#include "mha/simd_tanh.hpp"
#include "mha/visibility.hpp"

#ifdef MHA_PROFILE_NOINLINE  // profiling builds only: keeps each phase a separate function for perf
#define MHA_PHASE __attribute__((noinline))
#else
#define MHA_PHASE
#endif

namespace mha {
namespace MHA_SIMD_VARIANT {

using simd::madd;
using simd::VecF;
using simd::VecI;
constexpr int32_t kLanes = 4;  // f32x4: SSE4.2 natively, SIMD128 in wasm
static_assert(VecF::size == kLanes, "the micro-kernels are written for 4-lane vectors");

constexpr int32_t kMr = 4;  // query rows per micro-kernel (a Q panel)
constexpr int32_t kNr = 8;  // keys (QK^T) or output lanes (PV) per micro-kernel
// The largest keys per tile, and so the row stride of the K^T and score tiles: a compile-time constant,
// so that the micro-kernels address their operands with immediate offsets (see the top of this file).
constexpr int32_t kTileStride = 128;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.44269504088896341f;

constexpr int32_t round_up(int32_t x, int32_t m) { return (x + m - 1) / m * m; }

// Before the scalar tail loops (Dh % 4 columns, padding keys, zero padding): LLVM -O3 would vectorize and
// unroll each of them, with its runtime checks, into a kilobyte of wasm that bert-like shapes never run.
#ifdef __clang__
#define MHA_TAIL_LOOP _Pragma("clang loop vectorize(disable) interleave(disable) unroll(disable)")
#else
#define MHA_TAIL_LOOP
#endif

// ---------------------------------------------------------------------------------------------------
// Packing

// [a0 a1 b0 b1] and [a2 a3 b2 b3]: xsimd's zips of the vectors seen as 2 doubles (SSE's movelh/movehl).
inline VecF zip_lo_pairs(VecF a, VecF b) {
  using VecD = xsimd::batch<double>;
  return xsimd::bitwise_cast<VecF>(xsimd::zip_lo(xsimd::bitwise_cast<VecD>(a), xsimd::bitwise_cast<VecD>(b)));
}
inline VecF zip_hi_pairs(VecF a, VecF b) {
  using VecD = xsimd::batch<double>;
  return xsimd::bitwise_cast<VecF>(xsimd::zip_hi(xsimd::bitwise_cast<VecD>(a), xsimd::bitwise_cast<VecD>(b)));
}

// 4x4 transpose in registers: rows x0..x3 in, columns out (the 8 shuffles of _MM_TRANSPOSE4_PS).
inline void transpose_4x4(VecF& x0, VecF& x1, VecF& x2, VecF& x3) {
  const VecF t0 = xsimd::zip_lo(x0, x1);  // x00 x10 x01 x11
  const VecF t1 = xsimd::zip_lo(x2, x3);  // x20 x30 x21 x31
  const VecF t2 = xsimd::zip_hi(x0, x1);  // x02 x12 x03 x13
  const VecF t3 = xsimd::zip_hi(x2, x3);  // x22 x32 x23 x33
  x0 = zip_lo_pairs(t0, t1);
  x1 = zip_hi_pairs(t0, t1);
  x2 = zip_lo_pairs(t2, t3);
  x3 = zip_hi_pairs(t2, t3);
}

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

// Query rows [0, rows) (row_stride apart) -> panels of 4 rows, qp[(r/4)*Dh*4 + d*4 + r%4]; rows
// [rows, round_up(rows, 4)) are zero (their results are discarded).
MHA_PHASE inline void pack_q_panels(const float* q, int64_t row_stride, int32_t rows, int32_t dh, float* qp) {
  const int32_t rows4 = round_up(rows, kMr);
  const int32_t full4 = rows - rows % kMr;
  for (int32_t r = 0; r < full4; r += kMr) transpose_4_rows<kMr>(q + r * row_stride, row_stride, dh, qp + r * dh);
  for (int32_t r = full4; r < rows4; ++r) {
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

// What qk_tile does to a panel's scores between the dot products and the store, on registers (docs/spec.md
// 2.4, in log2 units): x = scale * q.k, then softcap s = c*log2(e) * tanh(x) (scale is then scale/c),
// ALiBi s -= slope*log2(e) * |p - j|, bias s += log2(e) * bias[b, h, i, j]. No second pass over the scores.
struct ScoreEpilogue {
  float scale = 0.0f;           // x = scale * q.k: scale*log2(e), or scale/c with softcap
  bool softcap = false;
  float softcap_scale = 0.0f;   // c*log2(e)
  bool alibi = false;
  float alibi_slope = 0.0f;     // slope[h]*log2(e)
  int32_t first_position = 0;   // position of the panel's row 0 (query_offset + i)
  int32_t first_key = 0;        // j0, the tile's first key
  const float* bias_rows[kMr] = {nullptr, nullptr, nullptr, nullptr};  // bias[b, h, i_r, j0], or all nullptr
  int32_t nk = 0;               // keys in the tile: bias is read for keys [0, nk) only
  const simd::TanhConstants* tanh = nullptr;
};

alignas(16) inline constexpr int32_t kLaneIndex[kLanes] = {0, 1, 2, 3};

// Zeros standing in for the bias rows of the padding rows of a panel (rows past the unit's last row).
alignas(16) inline constexpr float kZeroBiasRow[kTileStride] = {};

// The bias values of a row from tile key `key` that lie before nk, then zeros (the tile's last, partial
// vector of keys): out of line, so that the 8 copies of load_bias in qk_tile's epilogue stay one load each.
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

// The full tanh on a 4 x 8 block's scores (in memory: the rare branch of softcap_block, kept out of line
// so that its 8 copies of exp2 and a division are not inlined into the micro-kernel: 4 KB of wasm).
__attribute__((noinline)) inline void softcap_block_full(VecF* a, const ScoreEpilogue& ep) {
  const VecF cap(ep.softcap_scale);
  for (int32_t n = 0; n < 2 * kMr; ++n) a[n] = simd::tanh(a[n], *ep.tanh) * cap;
}

// The softcap of a 4 x 8 block's scores: c*log2(e) * tanh(x). Logits far below the cap (the common case:
// Gemma 2 caps at 50 and 30) leave every |x| below 0.625, where tanh is its polynomial alone: one test per
// block skips the exp2 and the division of the other branch (bert with softcap 30: 1.39x the plain call's
// time with both branches, 1.12x with the test).
inline void softcap_block(VecF& a00, VecF& a01, VecF& a10, VecF& a11, VecF& a20, VecF& a21, VecF& a30, VecF& a31,
                          const ScoreEpilogue& ep) {
  const simd::TanhConstants& k = *ep.tanh;
  using simd::pseudo_max;
  using xsimd::abs;
  const VecF largest = pseudo_max(pseudo_max(pseudo_max(abs(a00), abs(a01)), pseudo_max(abs(a10), abs(a11))),
                                  pseudo_max(pseudo_max(abs(a20), abs(a21)), pseudo_max(abs(a30), abs(a31))));
  // A NaN lane may pass or fail the test: both branches keep it (and its row is redone by the reference).
  if (xsimd::all(largest < k.small)) {
    const VecF cap(ep.softcap_scale);
    a00 = simd::tanh_small(a00, k) * cap, a01 = simd::tanh_small(a01, k) * cap;
    a10 = simd::tanh_small(a10, k) * cap, a11 = simd::tanh_small(a11, k) * cap;
    a20 = simd::tanh_small(a20, k) * cap, a21 = simd::tanh_small(a21, k) * cap;
    a30 = simd::tanh_small(a30, k) * cap, a31 = simd::tanh_small(a31, k) * cap;
    return;
  }
  alignas(16) VecF block[2 * kMr] = {a00, a01, a10, a11, a20, a21, a30, a31};
  softcap_block_full(block, ep);
  a00 = block[0], a01 = block[1], a10 = block[2], a11 = block[3];
  a20 = block[4], a21 = block[5], a30 = block[6], a31 = block[7];
}

// ALiBi and bias for the 4 scores of panel row `row` at tile keys [key, key + 4).
inline VecF score_epilogue(VecF x, int32_t row, int32_t key, const ScoreEpilogue& ep) {
  if (ep.alibi) {
    const VecI keys = VecI(ep.first_key + key) + VecI::load_aligned(kLaneIndex);
    // Unsigned, wrapping: a panel's padding rows (past the unit's last row) may lie past position 2^31 - 1
    // when queryOffset + seqLen is close to it; their scores are never used, but a signed overflow is UB.
    const int32_t position = static_cast<int32_t>(static_cast<uint32_t>(ep.first_position) + static_cast<uint32_t>(row));
    const VecF distance = xsimd::to_float(xsimd::abs(VecI(position) - keys));
    x -= VecF(ep.alibi_slope) * distance;
  }
  if (ep.bias_rows[0] != nullptr) x += VecF(kLog2e) * load_bias(ep.bias_rows[row], key, ep.nk);
  return x;
}

// s[i][jb..jb+8) = scale * (q_i . k_j) for the 4 rows of one Q panel (Dh, 4) and keys [0, nk8) of the
// K^T tile (Dh, kTileStride), then (kEpilogue) the score epilogue. Returns true when some scaled
// q.k is +-inf or NaN (q.k overflowed float32, or an input is not finite): checked here, on registers,
// at 9 operations per 32 scores instead of a pass over each row (a sum of finite scores that overflows
// only costs a needless, exact, recomputation). The check comes before the epilogue, whose -inf from a
// bias hides a key legitimately.
// With row_max, also row_max[0..4) = each row's largest score (the caller asks only when no key of the
// tile is hidden or padding): 8 maxima per 32 scores here, where a pass over the stored rows was 3% of
// long2k's time (measured with it: long2k, bert-b8 and cross 2-5% faster).
// 8 accumulators + 2 key vectors + 4 broadcasts + 1 product temporary = 15 of the 16 xmm registers (V8
// keeps the 16th as scratch): the largest block that does not spill without FMA.
template <bool kEpilogue>
MHA_PHASE inline bool qk_tile(const float* qpanel, int32_t dh, const float* kt, int32_t nk8, const ScoreEpilogue& ep,
                              float* s, float* row_max) {
  const VecF vscale(ep.scale);
  VecF nonfinite(0.0f);  // stays 0 unless a score is not finite (0 * inf = NaN)
  VecF max0(kNegInf), max1(kNegInf), max2(kNegInf), max3(kNegInf);  // lane-wise maxima of the 4 rows
  for (int32_t jb = 0; jb < nk8; jb += kNr) {
    VecF a00(0.0f), a01(0.0f), a10(0.0f), a11(0.0f), a20(0.0f), a21(0.0f), a30(0.0f), a31(0.0f);
    const float* qp = qpanel;
    const float* kp = kt + jb * dh;  // the panel of keys [jb, jb + 8)
    auto step = [&](const float* qd, const float* kd) {
      const VecF k0 = VecF::load_aligned(kd);
      const VecF k1 = VecF::load_aligned(kd + kLanes);
      const VecF b0(qd[0]), b1(qd[1]), b2(qd[2]), b3(qd[3]);
      a00 = madd(b0, k0, a00);
      a01 = madd(b0, k1, a01);
      a10 = madd(b1, k0, a10);
      a11 = madd(b1, k1, a11);
      a20 = madd(b2, k0, a20);
      a21 = madd(b2, k1, a21);
      a30 = madd(b3, k0, a30);
      a31 = madd(b3, k1, a31);
    };
    // Not unrolled: LLVM would hoist the second step's loads above the first step's arithmetic, and
    // the extra live vectors spill in V8 (measured: slower).
    for (int32_t d = 0; d < dh; ++d, qp += kMr, kp += kNr) step(qp, kp);
    a00 *= vscale, a01 *= vscale, a10 *= vscale, a11 *= vscale;
    a20 *= vscale, a21 *= vscale, a30 *= vscale, a31 *= vscale;
    nonfinite = madd(((a00 + a01) + (a10 + a11)) + ((a20 + a21) + (a30 + a31)), VecF(0.0f), nonfinite);
    if constexpr (kEpilogue) {
      if (ep.softcap) softcap_block(a00, a01, a10, a11, a20, a21, a30, a31, ep);
      a00 = score_epilogue(a00, 0, jb, ep), a01 = score_epilogue(a01, 0, jb + kLanes, ep);
      a10 = score_epilogue(a10, 1, jb, ep), a11 = score_epilogue(a11, 1, jb + kLanes, ep);
      a20 = score_epilogue(a20, 2, jb, ep), a21 = score_epilogue(a21, 2, jb + kLanes, ep);
      a30 = score_epilogue(a30, 3, jb, ep), a31 = score_epilogue(a31, 3, jb + kLanes, ep);
    }
    a00.store_aligned(s + jb);
    a01.store_aligned(s + jb + kLanes);
    a10.store_aligned(s + kTileStride + jb);
    a11.store_aligned(s + kTileStride + jb + kLanes);
    a20.store_aligned(s + 2 * kTileStride + jb);
    a21.store_aligned(s + 2 * kTileStride + jb + kLanes);
    a30.store_aligned(s + 3 * kTileStride + jb);
    a31.store_aligned(s + 3 * kTileStride + jb + kLanes);
    if (row_max != nullptr) {
      max0 = simd::pseudo_max(max0, simd::pseudo_max(a00, a01));
      max1 = simd::pseudo_max(max1, simd::pseudo_max(a10, a11));
      max2 = simd::pseudo_max(max2, simd::pseudo_max(a20, a21));
      max3 = simd::pseudo_max(max3, simd::pseudo_max(a30, a31));
    }
  }
  if (row_max != nullptr) {
    // row_max[i] = max of the lanes of max_i: two rounds of shuffles and maxima over the 4 rows at once.
    const VecF m01 = simd::pseudo_max(xsimd::zip_lo(max0, max1), xsimd::zip_hi(max0, max1));  // rows 0 1 0 1
    const VecF m23 = simd::pseudo_max(xsimd::zip_lo(max2, max3), xsimd::zip_hi(max2, max3));  // rows 2 3 2 3
    simd::pseudo_max(zip_lo_pairs(m01, m23), zip_hi_pairs(m01, m23)).store_aligned(row_max);
  }
  return xsimd::hadd(nonfinite) != 0.0f;
}

// o[0..4)[0..dh8) = o * alpha + p[0..4)[0..nk) @ v[0..nk): 4 rows x 8 output lanes per pass over the
// key tile; p rows are kTileStride apart, packed v and o rows dh8 apart. The rescale by alpha is folded
// into loading the accumulators.
MHA_PHASE inline void pv_tile(const float* p, const float* v, int32_t dh8, int32_t nk, const float* alpha, float* o) {
  const VecF al0(alpha[0]), al1(alpha[1]), al2(alpha[2]), al3(alpha[3]);
  float* o0 = o;
  float* o1 = o + dh8;
  float* o2 = o + 2 * dh8;
  float* o3 = o + 3 * dh8;
  for (int32_t d = 0; d < dh8; d += kNr) {
    VecF a00 = VecF::load_aligned(o0 + d) * al0, a01 = VecF::load_aligned(o0 + d + kLanes) * al0;
    VecF a10 = VecF::load_aligned(o1 + d) * al1, a11 = VecF::load_aligned(o1 + d + kLanes) * al1;
    VecF a20 = VecF::load_aligned(o2 + d) * al2, a21 = VecF::load_aligned(o2 + d + kLanes) * al2;
    VecF a30 = VecF::load_aligned(o3 + d) * al3, a31 = VecF::load_aligned(o3 + d + kLanes) * al3;
    const float* vp = v + d * nk;  // the panel of lanes [d, d + 8)
    const float* pp = p;
    auto step = [&](const float* pj, const float* vj) {
      const VecF v0 = VecF::load_aligned(vj);
      const VecF v1 = VecF::load_aligned(vj + kLanes);
      const VecF b0(pj[0]), b1(pj[kTileStride]), b2(pj[2 * kTileStride]), b3(pj[3 * kTileStride]);
      a00 = madd(b0, v0, a00);
      a01 = madd(b0, v1, a01);
      a10 = madd(b1, v0, a10);
      a11 = madd(b1, v1, a11);
      a20 = madd(b2, v0, a20);
      a21 = madd(b2, v1, a21);
      a30 = madd(b3, v0, a30);
      a31 = madd(b3, v1, a31);
    };
    for (int32_t j = 0; j < nk; ++j, ++pp, vp += kNr) step(pp, vp);
    a00.store_aligned(o0 + d);
    a01.store_aligned(o0 + d + kLanes);
    a10.store_aligned(o1 + d);
    a11.store_aligned(o1 + d + kLanes);
    a20.store_aligned(o2 + d);
    a21.store_aligned(o2 + d + kLanes);
    a30.store_aligned(o3 + d);
    a31.store_aligned(o3 + d + kLanes);
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
