// Integer arithmetic on int8 and int4 caches (docs/spec.md 5.1, `arithmetic: 'integer'`): one work item of
// decode_kernel.hpp with the dot products taken exactly in int32 over the stored integers. Included by
// decode_simd128.cpp (MHA_INTEGER_SIMD 1: the SIMD128 and relaxed variants) and decode_scalar.cpp
// (MHA_INTEGER_SIMD 0), into the variant's namespace.
//
// Bit-identical in every variant, thread count and engine: the only inexact operations are the float ones
// below, written once, as separate IEEE operations (one per statement: nothing to fuse), in a fixed order;
// the integer sums are exact whatever their order, so the SIMD and scalar dot loops may sum differently.
//   1. q of row r, per block nb of 32 head dims: qs = amax / 32767, qi = nearbyint(q * (32767 / amax)),
//      int16 (ggml's q8 query brought to 16 bits: 2^-16 of the block's largest |q|, far below the cache's
//      own 4- or 8-bit rounding);
//   2. s_j = sum over nb, in order, of float(sum_d qi * k_q) * (qs * k_scale), then the scale or softcap,
//      ALiBi and the mask as the scalar kernel writes them; m, p_j = exp2_exact(s_j - m), l = sum of p_j in
//      key order;
//   3. per chunk of 32 keys (a panel) and value block nb: w_j = p_j * v_scale, ws = wmax / 32767,
//      wi_j = nearbyint(w_j * (32767 / wmax)) (int16), o += float(sum_j wi_j * v_q) * ws.
// The error against float64 attention over the read-back values (docs/spec.md 5.1's bound) comes from the
// two 16-bit roundings: at most 2^-16 of the largest |q| of a block per dot-product term, and of the largest
// weight of a chunk per value term, whose sum over chunks is at most l.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "mha/cache/cache_codecs.hpp"
#include "mha/core/numeric.hpp"
#include "mha/core/workspace.hpp"
#include "mha/decode/decode_kernel.hpp"
#if MHA_INTEGER_SIMD
#include <xsimd/xsimd.hpp>

#include "mha/simd/simd_ops.hpp"
#define MHA_INTEGER_VARIANT MHA_SIMD_VARIANT
#else
#define MHA_INTEGER_VARIANT scalar
#endif
#include "mha/decode/decode_integer_dots.hpp"

namespace mha {
namespace MHA_INTEGER_VARIANT {
namespace {  // one translation unit per variant includes this
namespace integer_decode {

constexpr float kInt16Range = 32767.0f;

struct Layout {
  size_t qi = 0, qs = 0, q_bias = 0, s = 0, sums = 0, k_tile = 0, v_tile = 0, zero_row = 0, wi = 0, osum = 0,
         v_scales = 0, touched = 0;
  size_t total = 0;
};
// Scratch (floats, 64-byte aligned parts): qi (rows, Dh2) int16, qs (rows, NBk), q_bias (rows, NBk) int32
// (decode_integer_dots.hpp's int4 bias), s (rows, 512) scores then weights, sums (2, NBk, 32) int32 of one
// panel and two rows, k_tile (Dh, 32) int8 (an int4 panel unpacked),
// v_tile (32, Dv8) int8 (int4 rows unpacked), zero_row (Dv8 + 16) int8, wi (2, 32) int16, osum (2, 32) int32,
// v_scales (NBv, 64) one chunk's value scales by block (32 keys and the over-read of a row's 32-key loads),
// touched: one int32 that keeps the K pass's touches (Touch).
inline Layout layout(int32_t dh, int32_t dv) {
  const size_t dh2 = size_t(round_up(dh, 2)), dv8 = size_t(round_up(dv, 8)), nbk = size_t(scale_blocks(dh));
  Layout l;
  ScratchCursor c;
  l.qi = c.take(kDecodeMaxRowsPerItem * dh2 / 2);
  l.qs = c.take(kDecodeMaxRowsPerItem * nbk);
  l.q_bias = c.take(kDecodeMaxRowsPerItem * nbk);
  l.s = c.take(size_t(kDecodeMaxRowsPerItem) * kDecodeMaxKeysPerBlock);
  l.sums = c.take(kMaxDotRows * nbk * kKeysPerPanel);
  l.k_tile = c.take(dh2 * kKeysPerPanel / 4);
  l.v_tile = c.take((kKeysPerPanel * dv8 + 16) / 4);
  l.zero_row = c.take((dv8 + 16) / 4);
  l.wi = c.take(kMaxDotRows * kKeysPerPanel / 2);
  l.osum = c.take(kMaxDotRows * kKeysPerPanel);
  l.v_scales = c.take(size_t(scale_blocks(dv)) * 2 * kKeysPerPanel);
  l.touched = c.take(1);
  l.total = c.at;
  return l;
}

// ---- The float steps, the same operations in every variant.

inline uint32_t float_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
inline float bits_float(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

// 2^x for x <= 0 or NaN: simd_exp.hpp's reduction and polynomial, with a multiply and an add per Horner step
// (never fused: the relaxed variant's exp2 fuses them, which would change the bits between engines).
inline float exp2_exact(float x) {
  x = x < -127.0f ? -127.0f : x;  // NaN stays
  const float t = x + 12582912.0f;
  const float n = t - 12582912.0f;
  const float r = x - n;
  float p = 1.535336188319500e-4f * r;
  p = p + 1.339887440266574e-3f;
  p = p * r;
  p = p + 9.618437357674640e-3f;
  p = p * r;
  p = p + 5.550332471162809e-2f;
  p = p * r;
  p = p + 2.402264791363012e-1f;
  p = p * r;
  p = p + 6.931472028550421e-1f;
  p = p * r;
  p = p + 1.0f;
  return p * bits_float((float_bits(t) + 127u) << 23);
}

// n values of x to int16 with one scale: *scale = amax / 32767 and q = nearbyint(x * (32767 / amax)); all 0
// for amax 0 (or so small that 32767 / amax overflows). A non-finite x gives scale NaN (its row's scores
// are then NaN, as the reference's).
inline void quantize16(const float* x, int32_t n, int16_t* q, float* scale) {
  float amax = 0.0f;
  bool finite = true;
  for (int32_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    finite = finite && a <= 3.4028235e38f;
    amax = a > amax ? a : amax;
  }
  const float inv = kInt16Range / amax;
  if (!finite || !(inv <= 3.4028235e38f)) {
    for (int32_t i = 0; i < n; ++i) q[i] = 0;
    *scale = finite ? 0.0f : std::nanf("");
    return;
  }
  *scale = amax / kInt16Range;
  for (int32_t i = 0; i < n; ++i) {
    const float y = std::nearbyint(x[i] * inv);
    q[i] = static_cast<int16_t>(std::min(kInt16Range, std::max(-kInt16Range, y)));
  }
}

// ---- Row statistics and chunk weights: SIMD where the result cannot depend on it.

// The largest of row[first..last] with NaN skipped (a NaN score never wins), -inf for none, and -0 as +0:
// a maximum taken in any order is then the same float.
inline float row_max(const float* row, int32_t first, int32_t last) {
  float m = kNegInf;
  int32_t j = first;
#if MHA_INTEGER_SIMD
  simd::VecF acc(kNegInf);
  for (; j + 3 <= last; j += 4) acc = simd::pseudo_max(acc, simd::VecF::load_unaligned(row + j));
  alignas(16) float lanes[4];
  acc.store_aligned(lanes);
  for (const float x : lanes) m = x > m ? x : m;
#endif
  for (; j <= last; ++j) m = row[j] > m ? row[j] : m;
  return m + 0.0f;
}

// l: row[first..last] in 4 interleaved parts (key j to part (j - first) mod 4, each summed in key order),
// then (p0 + p1) + (p2 + p3); that order is part of the definition, and SIMD lanes are the parts.
inline float row_sum(const float* row, int32_t first, int32_t last) {
  alignas(16) float parts[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int32_t j = first;
#if MHA_INTEGER_SIMD
  simd::VecF acc(0.0f);
  for (; j + 3 <= last; j += 4) acc += simd::VecF::load_unaligned(row + j);
  acc.store_aligned(parts);
#endif
  for (; j <= last; ++j) parts[(j - first) & 3] += row[j];
  return (parts[0] + parts[1]) + (parts[2] + parts[3]);
}

// vt[nb * 64 + j] = vs[j * nbv + nb] for j < nk: one chunk's value scales by block. The SIMD variant
// transposes 4 keys at a time where nbv is 1, 2 or 4 (Dv <= 128) with zips, whose copies are exact.
inline void transpose_scales(const float* vs, int32_t nk, int32_t nbv, float* vt) {
  constexpr int32_t kStride = 2 * kKeysPerPanel;
  int32_t j = 0;
#if MHA_INTEGER_SIMD
  using simd::VecF;
  if (nbv == 1) {
    for (; j + 4 <= nk; j += 4) VecF::load_unaligned(vs + j).store_unaligned(vt + j);
  } else if (nbv == 2) {
    for (; j + 4 <= nk; j += 4) {
      const VecF a = VecF::load_unaligned(vs + 2 * j), b = VecF::load_unaligned(vs + 2 * j + 4);
      const VecF lo = xsimd::zip_lo(a, b), hi = xsimd::zip_hi(a, b);
      xsimd::zip_lo(lo, hi).store_unaligned(vt + j);
      xsimd::zip_hi(lo, hi).store_unaligned(vt + kStride + j);
    }
  } else if (nbv == 4) {
    using Pairs = xsimd::batch<double>;  // two floats a lane: 64-bit zips move them together
    for (; j + 4 <= nk; j += 4) {
      const float* k = vs + 4 * j;
      const VecF r0 = VecF::load_unaligned(k), r1 = VecF::load_unaligned(k + 4);
      const VecF r2 = VecF::load_unaligned(k + 8), r3 = VecF::load_unaligned(k + 12);
      const auto t0 = xsimd::bitwise_cast<Pairs>(xsimd::zip_lo(r0, r1));  // b0 of keys 0, 1; b1 of 0, 1
      const auto t1 = xsimd::bitwise_cast<Pairs>(xsimd::zip_lo(r2, r3));
      const auto t2 = xsimd::bitwise_cast<Pairs>(xsimd::zip_hi(r0, r1));  // b2 and b3
      const auto t3 = xsimd::bitwise_cast<Pairs>(xsimd::zip_hi(r2, r3));
      xsimd::bitwise_cast<VecF>(xsimd::zip_lo(t0, t1)).store_unaligned(vt + j);
      xsimd::bitwise_cast<VecF>(xsimd::zip_hi(t0, t1)).store_unaligned(vt + kStride + j);
      xsimd::bitwise_cast<VecF>(xsimd::zip_lo(t2, t3)).store_unaligned(vt + 2 * kStride + j);
      xsimd::bitwise_cast<VecF>(xsimd::zip_hi(t2, t3)).store_unaligned(vt + 3 * kStride + j);
    }
  }
#endif
  for (; j < nk; ++j)
    for (int32_t nb = 0; nb < nbv; ++nb) vt[nb * kStride + j] = vs[j * nbv + nb];
}

// One chunk's weights for one value block: w_j = p[j] * vs[j] (j < nk <= 32), wmax = their largest (NaN
// skipped; weights are >= 0: validated scales are), wi_j = nearbyint(w_j * (32767 / wmax)) as int16 (NaN as
// 0). Returns wmax / 32767, or 0 when every weight is 0 (or below 2^-113): nothing to add. The SIMD variant
// reads p and vs up to index 31 whatever nk is (scratch both; the lanes past nk are masked to 0).
inline float chunk_weights(const float* p, const float* vs, int32_t nk, int16_t* wi) {
#if MHA_INTEGER_SIMD
  using simd::VecF;
  alignas(16) static constexpr float kLane[4] = {0.0f, 1.0f, 2.0f, 3.0f};
  const VecF lane = VecF::load_aligned(kLane), count(static_cast<float>(nk));
  VecF w[kKeysPerPanel / 4];
  VecF wmax_lanes(0.0f);
  for (int32_t i = 0; i < kKeysPerPanel / 4; ++i) {
    const VecF x = VecF::load_unaligned(p + 4 * i) * VecF::load_unaligned(vs + 4 * i);
    w[i] = xsimd::select(lane + VecF(static_cast<float>(4 * i)) < count, x, VecF(0.0f));
    wmax_lanes = simd::pseudo_max(wmax_lanes, w[i]);
  }
  alignas(16) float lanes[4];
  wmax_lanes.store_aligned(lanes);
  float wmax = 0.0f;
  for (const float x : lanes) wmax = x > wmax ? x : wmax;
#else
  float w[kKeysPerPanel];
  float wmax = 0.0f;
  for (int32_t j = 0; j < nk; ++j) {
    w[j] = p[j] * vs[j];
    wmax = w[j] > wmax ? w[j] : wmax;
  }
#endif
  const float inv = kInt16Range / wmax;
  if (!(inv <= 3.4028235e38f)) return 0.0f;
#if MHA_INTEGER_SIMD
  const VecF inv_lanes(inv);
  for (int32_t i = 0; i < kKeysPerPanel / 8; ++i)
    simd::round_i16(w[2 * i] * inv_lanes, w[2 * i + 1] * inv_lanes).store_aligned(wi + 8 * i);
#else
  // |w * inv| <= 32767 (a NaN weight, from a NaN score, makes l NaN: the row is NaN whatever wi is).
  for (int32_t j = 0; j < nk; ++j) {
    const float y = std::nearbyint(w[j] * inv);
    wi[j] = static_cast<int16_t>(y == y ? y : 0.0f);
  }
#endif
  return wmax / kInt16Range;
}

// ---- The work item.

inline void run(const DecodeBlock& blk, float* scratch) {
  const Layout lay = layout(blk.head_dim, blk.value_dim);
  const int32_t dh = blk.head_dim, dh2 = round_up(dh, 2), dv8 = blk.dv8;
  const int32_t nbk = scale_blocks(dh), nbv = scale_blocks(blk.value_dim);
  const bool int4 = blk.dtype == CacheDType::kInt4;
  const int32_t base = blk.key_begin / kKeysPerPanel * kKeysPerPanel;
  auto* qi = reinterpret_cast<int16_t*>(scratch + lay.qi);
  float* qs = scratch + lay.qs;
  auto* q_bias = reinterpret_cast<int32_t*>(scratch + lay.q_bias);
  float* s = scratch + lay.s;
  auto* sums = reinterpret_cast<int32_t*>(scratch + lay.sums);
  auto* k_tile = reinterpret_cast<int8_t*>(scratch + lay.k_tile);
  auto* v_tile = reinterpret_cast<int8_t*>(scratch + lay.v_tile);
  auto* zero = reinterpret_cast<int8_t*>(scratch + lay.zero_row);
  auto* wi = reinterpret_cast<int16_t*>(scratch + lay.wi);
  auto* osum = reinterpret_cast<int32_t*>(scratch + lay.osum);
  float* v_scales = scratch + lay.v_scales;
  std::fill(zero, zero + dv8 + 16, int8_t{0});

  // 1. q to int16 per block.
  for (int32_t r = 0; r < blk.rows; ++r) {
    int16_t* row = qi + int64_t{r} * dh2;
    for (int32_t nb = 0; nb < nbk; ++nb) {
      const int32_t d0 = nb * kScaleBlock, n = std::min(kScaleBlock, dh - d0);
      quantize16(blk.q_rows[r] + d0, n, row + d0, qs + r * nbk + nb);
      if (int4 && kPackedInt4) {  // decode_integer_dots.hpp's bias of stored nibbles
        int32_t sum = 0;
        for (int32_t d = d0; d < d0 + n; ++d) sum += row[d];
        q_bias[r * nbk + nb] = 8 * sum;
      }
    }
    if (dh2 != dh) row[dh] = 0;
  }

  // 2. Scores, panel by panel: each panel (int4: as stored, or unpacked once) serves every row from L1.
  const int32_t panels = (blk.key_end - base + kKeysPerPanel - 1) / kKeysPerPanel;
  const bool packed_int4 = int4 && kPackedInt4;
  // Stored bytes of one K panel and one V row (int4: two values a byte).
  const int64_t key_panel_bytes = int64_t{dh} * (int4 ? kKeysPerPanel / 2 : kKeysPerPanel);
  const int64_t value_row_bytes = int4 ? dv8 / 2 : dv8;
  const auto* value_bytes = static_cast<const char*>(blk.value_rows);
  Touch touch, no_touch;  // the first row pair's K pass touches the V rows of its panel's keys
  touch.last = value_bytes + (blk.key_end * value_row_bytes - 4) / 64 * 64;
  no_touch.next = no_touch.last = touch.last;
  for (int32_t pi = 0; pi < panels; ++pi) {
    const int32_t panel = base / kKeysPerPanel + pi;
    touch.next = value_bytes + int64_t{std::max(blk.key_begin, panel * kKeysPerPanel)} * value_row_bytes / 64 * 64;
    const int8_t* keys = static_cast<const int8_t*>(blk.key_panels) + panel * key_panel_bytes;
    if (int4 && !packed_int4) {
      unpack_int4_panel(reinterpret_cast<const uint8_t*>(keys), dh, k_tile);
      keys = k_tile;
    }
    const float* key_scales = blk.key_scales + int64_t{panel} * nbk * kKeysPerPanel;  // (NBk, 32)
    for (int32_t r0 = 0; r0 < blk.rows; r0 += kMaxDotRows) {
      const int32_t n_rows = std::min(kMaxDotRows, blk.rows - r0);
      const int16_t* q_rows[kMaxDotRows] = {qi + int64_t{r0} * dh2, qi + int64_t{r0 + n_rows - 1} * dh2};
      const int32_t* biases[kMaxDotRows] = {q_bias + r0 * nbk, q_bias + (r0 + n_rows - 1) * nbk};
      int32_t* row_sums[kMaxDotRows] = {sums, sums + nbk * kKeysPerPanel};
      panel_dots(q_rows, n_rows, keys, packed_int4, biases, dh, row_sums, r0 == 0 ? touch : no_touch);
      for (int32_t r = r0; r < r0 + n_rows; ++r) {
        const int32_t* dots = row_sums[r - r0];
        float* out = s + int64_t{r} * kDecodeMaxKeysPerBlock + pi * kKeysPerPanel;
        for (int32_t c = 0; c < kKeysPerPanel; ++c) out[c] = 0.0f;
        for (int32_t nb = 0; nb < nbk; ++nb) {
          const float q_scale = qs[r * nbk + nb];
          for (int32_t c = 0; c < kKeysPerPanel; ++c) {
            const float scale = q_scale * key_scales[nb * kKeysPerPanel + c];
            const float term = static_cast<float>(dots[nb * kKeysPerPanel + c]) * scale;
            out[c] = out[c] + term;
          }
        }
      }
    }
  }

  // 3. Per row: scale or softcap, ALiBi, mask; m, p, l (the scalar kernel's formulas). Each step is its own
  // loop of independent keys (the compiler's vectors where it has them: the same operations per key), and
  // l sums in 4 interleaved parts, whose order is part of the definition.
  for (int32_t r = 0; r < blk.rows; ++r) {
    float* row = s + int64_t{r} * kDecodeMaxKeysPerBlock - base;  // row[j], j a key position
    const int32_t first = std::max(blk.visible[r].first, blk.key_begin);
    const int32_t last = std::min(blk.visible[r].last, blk.key_end - 1);
    if (blk.softcap_in != 0.0f) {
      for (int32_t j = first; j <= last; ++j)
        row[j] = blk.softcap_out * static_cast<float>(std::tanh(double{blk.softcap_in * row[j]}));
    } else {
      const float scale = blk.score_scale;
      for (int32_t j = first; j <= last; ++j) row[j] = scale * row[j];
    }
    if (blk.alibi != nullptr) {
      const float slope = blk.alibi[r];
      const int32_t position = blk.position[r];
      for (int32_t j = first; j <= last; ++j) {
        const float bias = slope * std::fabs(static_cast<float>(position - j));
        row[j] = row[j] - bias;
      }
    }
    const float m = row_max(row, first, last);
    const float m_sub = m == kNegInf ? 0.0f : m;
    for (int32_t j = first; j <= last; ++j) row[j] = exp2_exact(row[j] - m_sub);
    blk.m[r] = m;
    blk.l[r] = row_sum(row, first, last);
    std::fill(blk.o + int64_t{r} * dv8, blk.o + int64_t{r + 1} * dv8, 0.0f);
  }

  // 4. o = p V per chunk of one panel's keys and value block: the weights to int16 per chunk and block.
  for (int32_t t0 = blk.key_begin; t0 < blk.key_end;) {
    const int32_t t1 = std::min(blk.key_end, (t0 / kKeysPerPanel + 1) * kKeysPerPanel);
    // The chunk's first value row, as stored or unpacked.
    const int8_t* values = static_cast<const int8_t*>(blk.value_rows) + t0 * value_row_bytes;
    int64_t row_bytes = value_row_bytes;
    if (int4 && !packed_int4) {
      unpack_int4_rows(reinterpret_cast<const uint8_t*>(values), t1 - t0, dv8, v_tile);
      values = v_tile;
      row_bytes = dv8;
    }
    // The chunk's value scales by block, (NBv, 64): contiguous for chunk_weights, shared by the rows.
    const float* value_scales = blk.value_scales + int64_t{t0} * nbv;  // (keys, NBv)
    transpose_scales(value_scales, t1 - t0, nbv, v_scales);
    for (int32_t r0 = 0; r0 < blk.rows;) {
      // Rows r0 and r0 + 1 share the dot loops when they see the same keys of this chunk (GQA decode).
      const auto seen = [&](int32_t r) {
        return std::make_pair(std::max(blk.visible[r].first, t0), std::min(blk.visible[r].last, t1 - 1));
      };
      const auto [first, last] = seen(r0);
      const int32_t n_rows = r0 + 1 < blk.rows && seen(r0 + 1) == seen(r0) ? 2 : 1;
      const int32_t nk = last - first + 1;
      for (int32_t nb = 0; nk > 0 && nb < nbv; ++nb) {
        int16_t* w_rows[kMaxDotRows];
        int32_t* o_sums[kMaxDotRows];
        float w_scales[kMaxDotRows], *o_rows[kMaxDotRows];
        int32_t n_dot = 0;
        for (int32_t r = r0; r < r0 + n_rows; ++r) {
          const float* p = s + int64_t{r} * kDecodeMaxKeysPerBlock - base + first;
          w_rows[n_dot] = wi + n_dot * kKeysPerPanel;
          const float w_scale = chunk_weights(p, v_scales + nb * 2 * kKeysPerPanel + (first - t0), nk, w_rows[n_dot]);
          if (w_scale == 0.0f) continue;  // every weight 0 (or below 2^-113): nothing to add
          w_scales[n_dot] = w_scale;
          o_rows[n_dot] = blk.o + int64_t{r} * dv8;
          o_sums[n_dot] = osum + n_dot * kKeysPerPanel;
          ++n_dot;
        }
        if (n_dot == 0) continue;
        const int32_t c0 = nb * kScaleBlock, lanes = std::min(kScaleBlock, dv8 - c0);
        value_dots(w_rows, n_dot, values + (first - t0) * row_bytes, row_bytes, packed_int4, nk, c0, lanes, zero,
                   o_sums);
        for (int32_t k = 0; k < n_dot; ++k) {
          for (int32_t i = 0; i < lanes; ++i) {
            const float term = static_cast<float>(o_sums[k][i]) * w_scales[k];
            o_rows[k][c0 + i] = o_rows[k][c0 + i] + term;
          }
        }
      }
      r0 += n_rows;
    }
    t0 = t1;
  }
  *reinterpret_cast<int32_t*>(scratch + lay.touched) = touch.touched | no_touch.touched;  // keeps the loads
}

}  // namespace integer_decode
}  // namespace
}  // namespace MHA_INTEGER_VARIANT
}  // namespace mha

#undef MHA_INTEGER_VARIANT
