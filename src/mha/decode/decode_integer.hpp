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

namespace mha {
namespace MHA_INTEGER_VARIANT {
namespace {  // one translation unit per variant includes this
namespace integer_decode {

constexpr float kInt16Range = 32767.0f;

struct Layout {
  size_t qi = 0, qs = 0, s = 0, sums = 0, k_tile = 0, v_tile = 0, zero_row = 0, wi = 0, osum = 0, total = 0;
};
// Scratch (floats, 64-byte aligned parts): qi (rows, Dh2) int16, qs (rows, NBk), s (rows, 512) scores then
// weights, sums (NBk, 32) int32 of one panel and row, k_tile (Dh, 32) int8 (an int4 panel unpacked),
// v_tile (32, Dv8) int8 (int4 rows unpacked), zero_row (Dv8 + 16) int8, wi (32) int16, osum (32) int32.
inline Layout layout(int32_t dh, int32_t dv) {
  const size_t dh2 = size_t(round_up(dh, 2)), dv8 = size_t(round_up(dv, 8)), nbk = size_t(scale_blocks(dh));
  Layout l;
  ScratchCursor c;
  l.qi = c.take(kDecodeMaxRowsPerItem * dh2 / 2);
  l.qs = c.take(kDecodeMaxRowsPerItem * nbk);
  l.s = c.take(size_t(kDecodeMaxRowsPerItem) * kDecodeMaxKeysPerBlock);
  l.sums = c.take(nbk * kKeysPerPanel);
  l.k_tile = c.take(dh2 * kKeysPerPanel / 4);
  l.v_tile = c.take((kKeysPerPanel * dv8 + 16) / 4);
  l.zero_row = c.take((dv8 + 16) / 4);
  l.wi = c.take(kKeysPerPanel / 2);
  l.osum = c.take(kKeysPerPanel);
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

// ---- The integer dot products (exact; SIMD or plain loops).

// sums[nb * 32 + c] = sum over d of block nb of qi[d] * panel[d][c] (panel: (Dh, 32) int8, 16-byte aligned).
inline void panel_dots(const int16_t* qi, const int8_t* panel, int32_t dh, int32_t* sums) {
#if MHA_INTEGER_SIMD
  using simd::VecI;
  using simd::VecI8;
  const VecI8 zero(int8_t{0});
  for (int32_t d0 = 0; d0 < dh; d0 += kScaleBlock) {
    const int32_t d1 = std::min(dh, d0 + kScaleBlock);
    VecI acc[8];
    for (VecI& a : acc) a = VecI(0);
    for (int32_t d = d0; d < d1; d += 2) {  // head dims d, d + 1 side by side: one dot per 4 keys
      const int8_t* row = panel + int64_t{d} * kKeysPerPanel;
      const bool pair = d + 1 < dh;
      uint32_t qpair;
      const int16_t two[2] = {qi[d], pair ? qi[d + 1] : int16_t{0}};
      std::memcpy(&qpair, two, 4);
      const auto w = xsimd::bitwise_cast<simd::VecI16>(VecI(static_cast<int32_t>(qpair)));
      for (int half = 0; half < 2; ++half) {
        const VecI8 a = VecI8::load_aligned(row + 16 * half);
        const VecI8 b = pair ? VecI8::load_aligned(row + kKeysPerPanel + 16 * half) : zero;
        const VecI8 lo = xsimd::zip_lo(a, b), hi = xsimd::zip_hi(a, b);
        VecI* at = acc + 4 * half;
        at[0] += simd::dot_i16(simd::extend_i8(lo, false), w);
        at[1] += simd::dot_i16(simd::extend_i8(lo, true), w);
        at[2] += simd::dot_i16(simd::extend_i8(hi, false), w);
        at[3] += simd::dot_i16(simd::extend_i8(hi, true), w);
      }
    }
    for (int i = 0; i < 8; ++i) acc[i].store_aligned(sums + (d0 / kScaleBlock) * kKeysPerPanel + 4 * i);
  }
#else
  for (int32_t d0 = 0; d0 < dh; d0 += kScaleBlock) {
    int32_t* out = sums + (d0 / kScaleBlock) * kKeysPerPanel;
    for (int32_t c = 0; c < kKeysPerPanel; ++c) out[c] = 0;
    for (int32_t d = d0; d < std::min(dh, d0 + kScaleBlock); ++d)
      for (int32_t c = 0; c < kKeysPerPanel; ++c) out[c] += int32_t{qi[d]} * panel[int64_t{d} * kKeysPerPanel + c];
  }
#endif
}

// osum[i] = sum over the nk rows of wi[j] * rows[j][c0 + i], i < lanes (8, 16, 24 or 32, c0 + lanes <= Dv8);
// rows j at rows + j * stride (int8); zero: a row of Dv8 + 16 zeros, the partner of an odd last row.
inline void value_dots(const int16_t* wi, const int8_t* rows, int64_t stride, int32_t nk, int32_t c0, int32_t lanes,
                       const int8_t* zero, int32_t* osum) {
#if MHA_INTEGER_SIMD
  using simd::VecI;
  using simd::VecI8;
  VecI acc[8];
  for (VecI& a : acc) a = VecI(0);
  for (int32_t j = 0; j < nk; j += 2) {
    const int8_t* ra = rows + j * stride + c0;
    const int8_t* rb = j + 1 < nk ? rows + (j + 1) * stride + c0 : zero;
    uint32_t wpair;
    const int16_t two[2] = {wi[j], j + 1 < nk ? wi[j + 1] : int16_t{0}};
    std::memcpy(&wpair, two, 4);
    const auto w = xsimd::bitwise_cast<simd::VecI16>(VecI(static_cast<int32_t>(wpair)));
    for (int32_t g = 0; g * 16 < lanes; ++g) {
      const bool eight = lanes - g * 16 == 8;
      const VecI8 a = eight ? simd::load64_zero(ra + 16 * g) : VecI8::load_unaligned(ra + 16 * g);
      const VecI8 b = eight ? simd::load64_zero(rb + 16 * g) : VecI8::load_unaligned(rb + 16 * g);
      const VecI8 lo = xsimd::zip_lo(a, b), hi = xsimd::zip_hi(a, b);
      VecI* at = acc + 4 * g;
      at[0] += simd::dot_i16(simd::extend_i8(lo, false), w);
      at[1] += simd::dot_i16(simd::extend_i8(lo, true), w);
      if (eight) continue;
      at[2] += simd::dot_i16(simd::extend_i8(hi, false), w);
      at[3] += simd::dot_i16(simd::extend_i8(hi, true), w);
    }
  }
  for (int32_t i = 0; 4 * i < lanes; ++i) acc[i].store_aligned(osum + 4 * i);
#else
  (void)zero;
  for (int32_t i = 0; i < lanes; ++i) osum[i] = 0;
  for (int32_t j = 0; j < nk; ++j)
    for (int32_t i = 0; i < lanes; ++i) osum[i] += int32_t{wi[j]} * rows[j * stride + c0 + i];
#endif
}

// ---- int4 (codec_int4.hpp) unpacked to int8 for the loops above.

// A K panel: row d's 16 bytes hold keys 0..15 (low nibbles) and 16..31 (high), in order.
inline void unpack_int4_panel(const uint8_t* panel, int32_t dh, int8_t* tile) {
  for (int32_t d = 0; d < dh; ++d) {
#if MHA_INTEGER_SIMD
    const auto x = simd::VecI8::load_aligned(reinterpret_cast<const int8_t*>(panel) + 16 * d);
    simd::low_nibbles(x).store_aligned(tile + kKeysPerPanel * d);
    simd::high_nibbles(x).store_aligned(tile + kKeysPerPanel * d + 16);
#else
    for (int32_t c = 0; c < 16; ++c) {
      tile[kKeysPerPanel * d + c] = static_cast<int8_t>(q4::nibble(panel[16 * d + c], false));
      tile[kKeysPerPanel * d + 16 + c] = static_cast<int8_t>(q4::nibble(panel[16 * d + c], true));
    }
#endif
  }
}

// nk value rows (Dv8 / 2 bytes each, lanes 2i and 2i + 1 in byte i) to (nk, Dv8) int8; tile has 16 bytes
// of slack after its last row.
inline void unpack_int4_rows(const uint8_t* rows, int32_t nk, int32_t dv8, int8_t* tile) {
  for (int32_t j = 0; j < nk; ++j) {
    const uint8_t* row = rows + int64_t{j} * (dv8 / 2);
    int8_t* out = tile + int64_t{j} * dv8;
#if MHA_INTEGER_SIMD
    int32_t c = 0;
    for (; c + 16 <= dv8; c += 16) {
      const simd::VecI8 x = simd::load64_zero(reinterpret_cast<const int8_t*>(row) + c / 2);
      xsimd::zip_lo(simd::low_nibbles(x), simd::high_nibbles(x)).store_unaligned(out + c);
    }
    if (c < dv8) {  // the last 8 lanes: 4 bytes, never read past the row
      alignas(16) int8_t bytes[16] = {};
      std::memcpy(bytes, row + c / 2, 4);
      const auto x = simd::VecI8::load_aligned(bytes);
      xsimd::zip_lo(simd::low_nibbles(x), simd::high_nibbles(x)).store_unaligned(out + c);
    }
#else
    for (int32_t c = 0; c < dv8; ++c) out[c] = static_cast<int8_t>(q4::nibble(row[c / 2], c % 2 != 0));
#endif
  }
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
  float* s = scratch + lay.s;
  auto* sums = reinterpret_cast<int32_t*>(scratch + lay.sums);
  auto* k_tile = reinterpret_cast<int8_t*>(scratch + lay.k_tile);
  auto* v_tile = reinterpret_cast<int8_t*>(scratch + lay.v_tile);
  auto* zero = reinterpret_cast<int8_t*>(scratch + lay.zero_row);
  auto* wi = reinterpret_cast<int16_t*>(scratch + lay.wi);
  auto* osum = reinterpret_cast<int32_t*>(scratch + lay.osum);
  std::fill(zero, zero + dv8 + 16, int8_t{0});

  // 1. q to int16 per block.
  for (int32_t r = 0; r < blk.rows; ++r) {
    int16_t* row = qi + int64_t{r} * dh2;
    for (int32_t nb = 0; nb < nbk; ++nb) {
      const int32_t d0 = nb * kScaleBlock, n = std::min(kScaleBlock, dh - d0);
      quantize16(blk.q_rows[r] + d0, n, row + d0, qs + r * nbk + nb);
    }
    if (dh2 != dh) row[dh] = 0;
  }

  // 2. Scores, panel by panel: each panel (unpacked once for int4) serves every row from L1.
  const int32_t panels = (blk.key_end - base + kKeysPerPanel - 1) / kKeysPerPanel;
  for (int32_t pi = 0; pi < panels; ++pi) {
    const int32_t panel = base / kKeysPerPanel + pi;
    const int8_t* keys;
    if (int4) {
      unpack_int4_panel(static_cast<const uint8_t*>(blk.key_panels) + int64_t{panel} * dh * (kKeysPerPanel / 2), dh,
                        k_tile);
      keys = k_tile;
    } else {
      keys = static_cast<const int8_t*>(blk.key_panels) + int64_t{panel} * dh * kKeysPerPanel;
    }
    const float* key_scales = blk.key_scales + int64_t{panel} * nbk * kKeysPerPanel;  // (NBk, 32)
    for (int32_t r = 0; r < blk.rows; ++r) {
      panel_dots(qi + int64_t{r} * dh2, keys, dh, sums);
      float* out = s + int64_t{r} * kDecodeMaxKeysPerBlock + pi * kKeysPerPanel;
      for (int32_t c = 0; c < kKeysPerPanel; ++c) out[c] = 0.0f;
      for (int32_t nb = 0; nb < nbk; ++nb) {
        const float q_scale = qs[r * nbk + nb];
        for (int32_t c = 0; c < kKeysPerPanel; ++c) {
          const float scale = q_scale * key_scales[nb * kKeysPerPanel + c];
          const float term = static_cast<float>(sums[nb * kKeysPerPanel + c]) * scale;
          out[c] = out[c] + term;
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
    float m = kNegInf;
    for (int32_t j = first; j <= last; ++j) m = row[j] > m ? row[j] : m;
    const float m_sub = m == kNegInf ? 0.0f : m;
    for (int32_t j = first; j <= last; ++j) row[j] = exp2_exact(row[j] - m_sub);
    float parts[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int32_t j = first; j <= last; ++j) parts[(j - first) & 3] += row[j];
    const float l = (parts[0] + parts[1]) + (parts[2] + parts[3]);
    blk.m[r] = m;
    blk.l[r] = l;
    std::fill(blk.o + int64_t{r} * dv8, blk.o + int64_t{r + 1} * dv8, 0.0f);
  }

  // 4. o = p V per chunk of one panel's keys and value block: the weights to int16 per chunk and block.
  for (int32_t t0 = blk.key_begin; t0 < blk.key_end;) {
    const int32_t t1 = std::min(blk.key_end, (t0 / kKeysPerPanel + 1) * kKeysPerPanel);
    const int8_t* values;
    if (int4) {
      unpack_int4_rows(static_cast<const uint8_t*>(blk.value_rows) + int64_t{t0} * (dv8 / 2), t1 - t0, dv8, v_tile);
      values = v_tile;
    } else {
      values = static_cast<const int8_t*>(blk.value_rows) + int64_t{t0} * dv8;
    }
    const float* value_scales = blk.value_scales + int64_t{t0} * nbv;  // (keys, NBv)
    for (int32_t r = 0; r < blk.rows; ++r) {
      const float* p = s + int64_t{r} * kDecodeMaxKeysPerBlock - base;
      const int32_t first = std::max(blk.visible[r].first, t0), last = std::min(blk.visible[r].last, t1 - 1);
      if (first > last) continue;
      float* o = blk.o + int64_t{r} * dv8;
      const int32_t nk = last - first + 1;
      const float* pk = p + first;
      for (int32_t nb = 0; nb < nbv; ++nb) {
        const float* vs = value_scales + int64_t{first - t0} * nbv + nb;
        float w[kKeysPerPanel];
        for (int32_t j = 0; j < nk; ++j) w[j] = pk[j] * vs[int64_t{j} * nbv];
        float wmax = 0.0f;
        for (int32_t j = 0; j < nk; ++j) wmax = w[j] > wmax ? w[j] : wmax;
        const float inv = kInt16Range / wmax;
        if (!(inv <= 3.4028235e38f)) continue;  // every weight 0 (or below 2^-113): nothing to add
        const float w_scale = wmax / kInt16Range;
        // |w * inv| <= 32767 (a NaN weight, from a NaN score, makes l NaN: the row is NaN whatever wi is).
        for (int32_t j = 0; j < nk; ++j) {
          const float y = std::nearbyint(w[j] * inv);
          wi[j] = static_cast<int16_t>(y == y ? y : 0.0f);
        }
        const int32_t c0 = nb * kScaleBlock, lanes = std::min(kScaleBlock, dv8 - c0);
        value_dots(wi, values + int64_t{first - t0} * dv8, dv8, nk, c0, lanes, zero, osum);
        for (int32_t i = 0; i < lanes; ++i) {
          const float term = static_cast<float>(osum[i]) * w_scale;
          o[c0 + i] = o[c0 + i] + term;
        }
      }
    }
    t0 = t1;
  }
}

}  // namespace integer_decode
}  // namespace
}  // namespace MHA_INTEGER_VARIANT
}  // namespace mha

#undef MHA_INTEGER_VARIANT
