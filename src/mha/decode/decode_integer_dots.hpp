// The integer dot products of decode_integer.hpp (exact in int32: SIMD128 dots or plain loops, whose sums
// agree whatever their order) and the int4 unpacking for them. Included by decode_integer.hpp only, into
// the variant's namespace (MHA_INTEGER_SIMD and MHA_INTEGER_VARIANT as it sets them).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "mha/cache/cache_codecs.hpp"
#include "mha/cache/cache_layout.hpp"
#if MHA_INTEGER_SIMD
#include <xsimd/xsimd.hpp>

#include "mha/simd/simd_ops.hpp"
#endif

namespace mha {
namespace MHA_INTEGER_VARIANT {
namespace {  // one translation unit per variant includes this
namespace integer_decode {

constexpr int32_t kMaxDotRows = 2;  // query rows per dot loop (below)

// The dot loops take one query row or two (GQA's rows of one KV head, which share every loaded and
// widened panel and value row: two rows' accumulators still fit 16 registers when a pass covers 16 keys or
// lanes). A pair's two int16 factors (q of dims d, d + 1; weights of keys j, j + 1) are adjacent in memory
// and reach every lane pair with one load32_splat; an odd tail pairs with a zero row (and q's or wi's
// zero padding).
//
// The SIMD loops read int4 panels and rows as stored (kPackedInt4): two rows' bytes zipped, each byte pair
// then holds two keys' (or lanes') nibble pairs, taken as n + 8 in [0, 15] (an xor, a mask, and for high
// nibbles a 16-bit shift) and zero-extended; sum(x * (n + 8)) - 8 * sum(x) is the exact sum(x * n). That
// costs about what int8's loads cost, where unpacking to int8 first cost 1.4x the int8 step. The plain
// loops read them unpacked.

// Lines touched during a K pass (wasm has no prefetch): one 64-byte line of the V rows the panel's keys
// will need, per pair of head dims, so that they stream in under the dot products (as the float paths'
// qk_row_touching does); clamped to the last line. `touched` keeps the loads.
struct Touch {
  const char* next = nullptr;
  const char* last = nullptr;
  int32_t touched = 0;
  void line() {
    touched |= *reinterpret_cast<const int32_t*>(std::min(next, last));
    next += 64;
  }
};

#if MHA_INTEGER_SIMD
constexpr bool kPackedInt4 = true;

// Zipped int4 bytes with n + 8 in each nibble; int8 bytes as they are.
template <bool kInt4>
inline simd::VecI8 offset(simd::VecI8 z, const simd::Nibbles& nib) {
  if constexpr (kInt4) return nib.offset(z);
  return z;
}

// The 8 int16 lanes of `e` from bytes `z` of zipped rows: int8 bytes sign-extended (low or high 8), or
// int4 byte pairs' low or high nibbles (nibble_high) zero-extended (low or high 8 bytes).
template <bool kInt4>
inline simd::VecI16 widen(simd::VecI8 z, bool nibble_high, bool high, const simd::Nibbles& nib) {
  if constexpr (kInt4) return simd::extend_u8(nibble_high ? nib.high_u(z) : nib.low_u(z), high);
  return simd::extend_i8(z, high);
}

// sum(x) of one row's 32 int16 factors (zero past the used ones), as the bias of its int4 sums.
inline int32_t sum_i16x32(const int16_t* x) {
  const simd::VecI16 ones(int16_t{1});
  simd::VecI acc = simd::dot_i16(simd::VecI16::load_aligned(x), ones);
  for (int i = 1; i < 4; ++i) acc += simd::dot_i16(simd::VecI16::load_aligned(x + 8 * i), ones);
  alignas(16) int32_t lanes[4];
  acc.store_aligned(lanes);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// panel: (Dh, 32) int8, or (Dh, 16) bytes of int4 (row d: keys 0..15 in the low nibbles, 16..31 in the
// high), 16-byte aligned. q_bias[r]: 8 * sum of qi[r] per block (int4 only).
template <int kRows, bool kInt4>
inline void panel_dots_rows(const int16_t* const* qi, const int8_t* panel, int32_t dh, const int32_t* const* q_bias,
                            int32_t* const* sums, Touch& touch) {
  using simd::VecI;
  using simd::VecI8;
  constexpr int32_t kHalves = kRows == 1 ? 2 : 1;            // 16-key halves per pass
  constexpr int32_t kRowBytes = kInt4 ? 16 : kKeysPerPanel;  // of one head dim
  const VecI8 zero(int8_t{0});
  const simd::Nibbles nib;
  for (int32_t d0 = 0, nb = 0; d0 < dh; d0 += kScaleBlock, ++nb) {
    const int32_t d1 = std::min(dh, d0 + kScaleBlock);
    for (int32_t h0 = 0; h0 < 2; h0 += kHalves) {
      VecI acc[kRows][4 * kHalves];
      for (auto& row : acc)
        for (VecI& a : row) a = VecI(0);
      const auto step = [&](const int8_t* row_a, const int8_t* row_b, int32_t d) {
        touch.line();
        simd::VecI16 w[kRows];
        for (int r = 0; r < kRows; ++r) w[r] = simd::splat_pair_i16(qi[r] + d);
        for (int32_t h = 0; h < kHalves; ++h) {
          // int8: this half's 16 keys from each row; int4: all 32 keys' bytes, the half a nibble.
          const int32_t at = kInt4 ? 0 : 16 * (h0 + h);
          const VecI8 a = VecI8::load_aligned(row_a + at);
          const VecI8 b = row_b != nullptr ? VecI8::load_aligned(row_b + at) : zero;
          const VecI8 lo = offset<kInt4>(xsimd::zip_lo(a, b), nib), hi = offset<kInt4>(xsimd::zip_hi(a, b), nib);
          const bool upper = h0 + h == 1;
          const simd::VecI16 e[4] = {widen<kInt4>(lo, upper, false, nib), widen<kInt4>(lo, upper, true, nib),
                                     widen<kInt4>(hi, upper, false, nib), widen<kInt4>(hi, upper, true, nib)};
          for (int r = 0; r < kRows; ++r)
            for (int i = 0; i < 4; ++i) acc[r][4 * h + i] += simd::dot_i16(e[i], w[r]);
        }
      };
      int32_t d = d0;
      for (; d + 1 < d1; d += 2) step(panel + int64_t{d} * kRowBytes, panel + int64_t{d + 1} * kRowBytes, d);
      if (d < d1) step(panel + int64_t{d} * kRowBytes, nullptr, d);
      for (int r = 0; r < kRows; ++r) {
        const VecI bias(kInt4 ? q_bias[r][nb] : 0);
        for (int32_t i = 0; i < 4 * kHalves; ++i)
          (acc[r][i] - bias).store_aligned(sums[r] + nb * kKeysPerPanel + 16 * h0 + 4 * i);
      }
    }
  }
}

// kLanes (32, or 8 for each group of a shorter last block: value_dots) lanes from c0 of nk value rows:
// int8, or int4 (lanes 2i and 2i + 1 in byte i: a byte pair's low nibbles are even lanes, its high ones
// odd lanes, put back in order at the end).
template <int32_t kLanes, int kRows, bool kInt4>
inline void value_dots_rows(const int16_t* const* wi, const int8_t* rows, int64_t row_bytes, int32_t nk, int32_t c0,
                            const int8_t* zero, int32_t* const* osum) {
  using simd::VecI;
  using simd::VecI8;
  constexpr int32_t kGroups = (kLanes + 15) / 16;  // of 16 lanes; the last may be 8
  constexpr int32_t kGroupsPerPass = kRows == 1 ? kGroups : 1;
  constexpr bool kEightLast = kLanes % 16 == 8;
  const simd::Nibbles nib;
  int32_t bias[kRows] = {};
  if constexpr (kInt4) {
    for (int r = 0; r < kRows; ++r) bias[r] = 8 * sum_i16x32(wi[r]);
  }
  for (int32_t g0 = 0; g0 < kGroups; g0 += kGroupsPerPass) {
    VecI acc[kRows][4 * kGroupsPerPass];
    for (auto& row : acc)
      for (VecI& a : row) a = VecI(0);
    const auto step = [&](const int8_t* ra, const int8_t* rb, int32_t j) {
      simd::VecI16 w[kRows];
      for (int r = 0; r < kRows; ++r) w[r] = simd::splat_pair_i16(wi[r] + j);
      for (int32_t gg = 0; gg < kGroupsPerPass; ++gg) {
        const bool eight = kEightLast && g0 + gg == kGroups - 1;  // 2 dots
        simd::VecI16 e[4];
        if constexpr (kInt4) {  // 8 bytes (16 lanes) or 4 (8 lanes) of each row
          const int32_t at = 8 * (g0 + gg);
          const VecI8 a = eight ? simd::load32_zero(ra + at) : simd::load64_zero(ra + at);
          const VecI8 b = eight ? simd::load32_zero(rb + at) : simd::load64_zero(rb + at);
          const VecI8 z = nib.offset(xsimd::zip_lo(a, b));
          e[0] = widen<true>(z, false, false, nib), e[1] = widen<true>(z, false, true, nib);  // even lanes
          e[2] = widen<true>(z, true, false, nib), e[3] = widen<true>(z, true, true, nib);    // odd lanes
        } else {
          const int32_t at = 16 * (g0 + gg);
          const VecI8 a = eight ? simd::load64_zero(ra + at) : VecI8::load_unaligned(ra + at);
          const VecI8 b = eight ? simd::load64_zero(rb + at) : VecI8::load_unaligned(rb + at);
          const VecI8 lo = xsimd::zip_lo(a, b), hi = xsimd::zip_hi(a, b);
          e[0] = simd::extend_i8(lo, false), e[1] = simd::extend_i8(lo, true);
          e[2] = simd::extend_i8(hi, false), e[3] = simd::extend_i8(hi, true);
        }
        for (int r = 0; r < kRows; ++r) {
          for (int i = 0; i < 4; ++i) {
            if (eight && (kInt4 ? i % 2 == 1 : i >= 2)) continue;  // int8: lanes 8..15; int4: even or odd ones
            acc[r][4 * gg + i] += simd::dot_i16(e[i], w[r]);
          }
        }
      }
    };
    const int32_t row_at = kInt4 ? c0 / 2 : c0;  // int4: lane c0 in byte c0 / 2
    int32_t j = 0;
    for (; j + 1 < nk; j += 2) step(rows + j * row_bytes + row_at, rows + (j + 1) * row_bytes + row_at, j);
    if (j < nk) step(rows + j * row_bytes + row_at, zero, j);
    const int32_t lanes = std::min(16 * kGroupsPerPass, kLanes - 16 * g0);
    for (int r = 0; r < kRows; ++r) {
      for (int32_t gg = 0; 16 * gg < lanes; ++gg) {
        VecI* g = acc[r] + 4 * gg;
        int32_t* out = osum[r] + 16 * (g0 + gg);
        if constexpr (kInt4) {  // even lanes in g[0..1], odd in g[2..3]: interleaved, less the bias
          const VecI b(bias[r]);
          (xsimd::zip_lo(g[0], g[2]) - b).store_aligned(out);
          (xsimd::zip_hi(g[0], g[2]) - b).store_aligned(out + 4);
          if (lanes - 16 * gg == 8) continue;
          (xsimd::zip_lo(g[1], g[3]) - b).store_aligned(out + 8);
          (xsimd::zip_hi(g[1], g[3]) - b).store_aligned(out + 12);
        } else {
          for (int32_t i = 0; i < 4 && 16 * gg + 4 * i < lanes; ++i) g[i].store_aligned(out + 4 * i);
        }
      }
    }
  }
}
#else
constexpr bool kPackedInt4 = false;
#endif

// sums[r][nb * 32 + c] = sum over d of block nb of qi[r][d] * k[d][c], r < n_rows <= 2, from a K panel
// (16-byte aligned): (Dh, 32) int8, or int4 as stored where int4 (kPackedInt4 only; q_bias[r]: 8 times the
// sum of qi[r] per block). qi rows are padded with a 0 to even length.
inline void panel_dots(const int16_t* const* qi, int32_t n_rows, const int8_t* panel, bool int4,
                       const int32_t* const* q_bias, int32_t dh, int32_t* const* sums, Touch& touch) {
#if MHA_INTEGER_SIMD
  if (n_rows == 2) {
    int4 ? panel_dots_rows<2, true>(qi, panel, dh, q_bias, sums, touch)
         : panel_dots_rows<2, false>(qi, panel, dh, q_bias, sums, touch);
  } else {
    int4 ? panel_dots_rows<1, true>(qi, panel, dh, q_bias, sums, touch)
         : panel_dots_rows<1, false>(qi, panel, dh, q_bias, sums, touch);
  }
#else
  (void)int4, (void)q_bias, (void)touch;
  for (int32_t r = 0; r < n_rows; ++r) {
    for (int32_t d0 = 0; d0 < dh; d0 += kScaleBlock) {
      int32_t* out = sums[r] + (d0 / kScaleBlock) * kKeysPerPanel;
      for (int32_t c = 0; c < kKeysPerPanel; ++c) out[c] = 0;
      for (int32_t d = d0; d < std::min(dh, d0 + kScaleBlock); ++d)
        for (int32_t c = 0; c < kKeysPerPanel; ++c) out[c] += int32_t{qi[r][d]} * panel[int64_t{d} * kKeysPerPanel + c];
    }
  }
#endif
}

// osum[r][i] = sum over the nk value rows j of wi[r][j] * v[j][c0 + i], i < lanes (8, 16, 24 or 32, c0 +
// lanes <= Dv8), r < n_rows <= 2; row j at rows + j * row_bytes: Dv8 int8, or int4 as stored where int4
// (kPackedInt4 only); wi rows padded with zeros to 32; zero: Dv8 + 16 zero bytes, the partner of an odd
// last row.
inline void value_dots(const int16_t* const* wi, int32_t n_rows, const int8_t* rows, int64_t row_bytes, bool int4,
                       int32_t nk, int32_t c0, int32_t lanes, const int8_t* zero, int32_t* const* osum) {
#if MHA_INTEGER_SIMD
  // A whole block, one or two rows; a shorter last block (Dv not a multiple of 32) in groups of 8 lanes,
  // row by row: rare shapes, and each instance of these loops costs the modules about 0.3 kB.
  const auto block = [&](auto int4_tag) {
    constexpr bool kInt4 = decltype(int4_tag)::value;
    if (lanes == kScaleBlock) {
      n_rows == 2 ? value_dots_rows<kScaleBlock, 2, kInt4>(wi, rows, row_bytes, nk, c0, zero, osum)
                  : value_dots_rows<kScaleBlock, 1, kInt4>(wi, rows, row_bytes, nk, c0, zero, osum);
      return;
    }
    for (int32_t r = 0; r < n_rows; ++r) {
      for (int32_t g = 0; g < lanes; g += 8) {
        int32_t* out = osum[r] + g;
        value_dots_rows<8, 1, kInt4>(wi + r, rows, row_bytes, nk, c0 + g, zero, &out);
      }
    }
  };
  int4 ? block(std::true_type()) : block(std::false_type());
#else
  (void)zero, (void)int4;
  for (int32_t r = 0; r < n_rows; ++r) {
    for (int32_t i = 0; i < lanes; ++i) osum[r][i] = 0;
    for (int32_t j = 0; j < nk; ++j)
      for (int32_t i = 0; i < lanes; ++i) osum[r][i] += int32_t{wi[r][j]} * rows[j * row_bytes + c0 + i];
  }
#endif
}

// ---- int4 (codec_int4.hpp) unpacked to int8 for the loops above.

// A K panel: row d's 16 bytes hold keys 0..15 (low nibbles) and 16..31 (high), in order.
inline void unpack_int4_panel(const uint8_t* panel, int32_t dh, int8_t* tile) {
#if MHA_INTEGER_SIMD
  const simd::Nibbles nibbles;
#endif
  for (int32_t d = 0; d < dh; ++d) {
#if MHA_INTEGER_SIMD
    const auto x = simd::VecI8::load_aligned(reinterpret_cast<const int8_t*>(panel) + 16 * d);
    nibbles.low(x).store_aligned(tile + kKeysPerPanel * d);
    nibbles.high(x).store_aligned(tile + kKeysPerPanel * d + 16);
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
#if MHA_INTEGER_SIMD
  const simd::Nibbles nibbles;
#endif
  for (int32_t j = 0; j < nk; ++j) {
    const uint8_t* row = rows + int64_t{j} * (dv8 / 2);
    int8_t* out = tile + int64_t{j} * dv8;
#if MHA_INTEGER_SIMD
    int32_t c = 0;
    for (; c + 32 <= dv8; c += 32) {
      const auto x = simd::VecI8::load_unaligned(reinterpret_cast<const int8_t*>(row) + c / 2);
      const simd::VecI8 low = nibbles.low(x), high = nibbles.high(x);
      xsimd::zip_lo(low, high).store_unaligned(out + c);
      xsimd::zip_hi(low, high).store_unaligned(out + c + 16);
    }
    if (c + 16 <= dv8) {
      const simd::VecI8 x = simd::load64_zero(reinterpret_cast<const int8_t*>(row) + c / 2);
      xsimd::zip_lo(nibbles.low(x), nibbles.high(x)).store_unaligned(out + c);
      c += 16;
    }
    if (c < dv8) {  // the last 8 lanes: 4 bytes, never read past the row
      alignas(16) int8_t bytes[16] = {};
      std::memcpy(bytes, row + c / 2, 4);
      const auto x = simd::VecI8::load_aligned(bytes);
      xsimd::zip_lo(nibbles.low(x), nibbles.high(x)).store_unaligned(out + c);
    }
#else
    for (int32_t c = 0; c < dv8; ++c) out[c] = static_cast<int8_t>(q4::nibble(row[c / 2], c % 2 != 0));
#endif
  }
}

}  // namespace integer_decode
}  // namespace
}  // namespace MHA_INTEGER_VARIANT
}  // namespace mha
