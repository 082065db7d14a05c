// The SIMD decode kernel's int8 loops (docs/spec.md 4.8; kv_cache.hpp: K panels (Dh, 32) of int8 with
// scales (NBk, 32) per panel, one per key and 32 head dims; V rows of Dv8 int8 with scales (capacity,
// NBv), one per key and 32 lanes). Included only by decode_simd128.cpp, inside its variant's namespace,
// after decode_simd128_micro.hpp. Two ways to read a block:
//   - one row (the memory-bound step): the int8 values are widened in registers to exact integers and
//     each block's scale is applied once per 32 head dims to the dot products (qk_int8_row) and once per
//     key and 32 lanes to the weights (pv_int8_row), so the inner loops cost what float32's do plus the
//     widening;
//   - 2 or more rows: each K panel and V tile is widened with its scales into L1 as float32 q * scale
//     (the cache's read-back values), which the float32 micro-kernels then read once per 4-row chunk.
#pragma once

#include <algorithm>
#include <cstdint>

#include <xsimd/xsimd.hpp>

#include "mha/decode/decode_kernel.hpp"
#include "mha/simd/simd_transpose.hpp"

namespace mha {
namespace MHA_SIMD_VARIANT {
namespace {  // one translation unit per variant includes this

// 16 int8 in one 16-byte lane group -> 4 vectors of the integers times 2^24 in strided order: w[m] lane
// i is 2^24 * element 4i + m, exact (8 significant bits). Per 32-bit lane of 4 bytes, each byte is moved
// to the top and the bytes below it cleared: 3 shifts, 3 masks and 4 converts per 16 values, no
// shuffles (Emscripten 3.1.6 emulates SSE4.1's sign-extending byte widening lane by lane; an interleave
// chain costs 14 operations, and moving each byte down again by an arithmetic shift 4 more, all on the
// shift ports).
// The callers take the 2^-24 out once per block (scores) or once per item (o).
struct Int8Widener {
  VecI top_byte = VecI(static_cast<int32_t>(0xff000000u));
  Int8Widener() { mha::simd::pin_in_register(top_byte); }
  void widen16(simd::VecI8 x16, VecF w[4]) const {
    const VecI x = xsimd::bitwise_cast<VecI>(x16);
    w[0] = xsimd::to_float(x << 24);
    w[1] = xsimd::to_float((x << 16) & top_byte);
    w[2] = xsimd::to_float((x << 8) & top_byte);
    w[3] = xsimd::to_float(x & top_byte);
  }
};
constexpr float kInt8Unscale = 1.0f / 16777216.0f;  // 2^-24
constexpr int32_t kInt8RowWeights = 64;             // keys whose weights pv_int8_lanes computes at a time

// Four vectors in strided order (w[m] lane i = element 4i + m) -> 16 floats in element order at dst.
inline void store_strided(VecF w[4], float* dst) {
  simd::transpose_4x4(w[0], w[1], w[2], w[3]);
  for (int m = 0; m < 4; ++m) w[m].store_aligned(dst + kLanes * m);
}

// s[0..31] = q . k for one row (qpanel: (Dh, 4), the row in column 0, every |q| <= kMaxFoldableQ, so the
// 2^24-scaled products and their sums stay far from overflow) against one int8 K panel and its scales.
// Per block of 32 head dims and 16 keys (half a panel row: 4 accumulators, no spills), the integer dot
// products gather in registers, then add times 2^-24 and the block's scales to `sums` (32 floats, L1,
// strided). The first half's pass also touches the next 32 bytes of V from `touch` (clamped to
// touch_last) per panel row, as qk_row_touching does, so that the V rows of these keys stream in during
// the K pass.
inline void qk_int8_row(const float* qpanel, const int8_t* panel, const float* scales, int32_t dh, float* s,
                        float* sums, const Int8Widener& widen, const char*& touch, const char* touch_last,
                        int32_t& touched) {
  const VecF unscale(kInt8Unscale);
  for (int32_t d0 = 0, nb = 0; d0 < dh; d0 += 32, ++nb) {
    const int32_t d1 = std::min(dh, d0 + 32);
    for (int half = 0; half < 2; ++half) {
      VecF acc[4];
      for (int m = 0; m < 4; ++m) acc[m] = VecF(0.0f);
      for (int32_t d = d0; d < d1; ++d) {
        const VecF b(qpanel[d * kChunk]);
        VecF w[4];
        widen.widen16(simd::VecI8::load_aligned(panel + int64_t{d} * kKeysPerPanel + 16 * half), w);
        for (int m = 0; m < 4; ++m) acc[m] = madd(b, w[m], acc[m]);
        if (half == 0) {
          touched |= *reinterpret_cast<const int32_t*>(std::min(touch, touch_last));
          touch += kKeysPerPanel;
        }
      }
      // The block's 16 scales of these keys, in key order, put in the strided order of acc.
      const float* sc = scales + nb * kKeysPerPanel + 16 * half;
      VecF scale[4] = {VecF::load_aligned(sc), VecF::load_aligned(sc + 4), VecF::load_aligned(sc + 8),
                       VecF::load_aligned(sc + 12)};
      simd::transpose_4x4(scale[0], scale[1], scale[2], scale[3]);
      for (int m = 0; m < 4; ++m) {
        float* at = sums + kLanes * (4 * half + m);
        const VecF prior = nb == 0 ? VecF(0.0f) : VecF::load_aligned(at);
        madd(acc[m] * unscale, scale[m], prior).store_aligned(at);
      }
    }
  }
  for (int half = 0; half < 2; ++half) {
    VecF w[4];
    for (int m = 0; m < 4; ++m) w[m] = VecF::load_aligned(sums + kLanes * (4 * half + m));
    store_strided(w, s + 16 * half);
  }
}

// o_strided[c, c + 16 * kGroups) (kHalf: only the first 8 lanes read, Dv8 % 16 == 8) = 2^24 * the sum
// over the nk keys of p_j * scale_{j, c / 32} * v_{j, c} (the value rows at v, Dv8 int8 each, and their
// scales (nk, NBv)): the lanes lie in one block of 32 (c % 32 == 0, or c % 32 == 16 for the last ones),
// so each key's weight p_j * scale is one multiply, taken kInt8RowWeights keys at a time into `weights`
// and then broadcast by a load. The accumulators (4 per 16 lanes) stay in registers over all the keys,
// one independent add per key each.
template <int kGroups, bool kHalf>
inline void pv_int8_lanes(const float* p, const int8_t* v, const float* scales, int32_t dv8, int32_t nbv, int32_t nk,
                          int32_t c, float* o_strided, float* weights, const Int8Widener& widen) {
  VecF acc[4 * kGroups];
  for (int x = 0; x < 4 * kGroups; ++x) acc[x] = VecF(0.0f);
  const int32_t nb = c / 32;
  for (int32_t j0 = 0; j0 < nk; j0 += kInt8RowWeights) {
    const int32_t j1 = std::min(nk, j0 + kInt8RowWeights);
    for (int32_t j = j0; j < j1; ++j) weights[j - j0] = p[j] * scales[int64_t{j} * nbv + nb];
    for (int32_t j = j0; j < j1; ++j) {
      const VecF b(weights[j - j0]);
      const int8_t* row = v + int64_t{j} * dv8 + c;
      for (int g = 0; g < kGroups; ++g) {
        const int8_t* at = row + 16 * g;
        VecF w[4];
        widen.widen16(kHalf ? simd::load64_zero(at) : simd::VecI8::load_unaligned(at), w);
        for (int m = 0; m < 4; ++m) acc[4 * g + m] = madd(b, w[m], acc[4 * g + m]);
      }
    }
  }
  for (int x = 0; x < 4 * kGroups; ++x) acc[x].store_aligned(o_strided + c + kLanes * x);
}

// o_strided (Dv16 floats, each 16 lanes in strided order) = 2^24 * sum_j p_j * scale_{j, c / 32} * v_{j, c}
// over the nk value rows at v and their scales: 32 lanes (one block) per sweep of the keys.
inline void pv_int8_row(const float* p, const int8_t* v, const float* scales, int32_t dv8, int32_t nbv, int32_t nk,
                        float* o_strided, float* weights, const Int8Widener& widen) {
  int32_t c = 0;
  for (; c + 32 <= dv8; c += 32) pv_int8_lanes<2, false>(p, v, scales, dv8, nbv, nk, c, o_strided, weights, widen);
  if (c + 16 <= dv8) pv_int8_lanes<1, false>(p, v, scales, dv8, nbv, nk, c, o_strided, weights, widen), c += 16;
  if (c < dv8) pv_int8_lanes<1, true>(p, v, scales, dv8, nbv, nk, c, o_strided, weights, widen);
}

// The staged loops widen by two interleaves that repeat each byte into its 32-bit lane and an
// arithmetic shift by 24 (element order, which the float32 micro-kernels read).
inline VecF int8_values(simd::VecI8 x16, int quarter) {
  const auto bytes2 =
      xsimd::bitwise_cast<simd::VecI16>(quarter < 2 ? xsimd::zip_lo(x16, x16) : xsimd::zip_hi(x16, x16));
  const auto bytes4 = quarter % 2 == 0 ? xsimd::zip_lo(bytes2, bytes2) : xsimd::zip_hi(bytes2, bytes2);
  return xsimd::to_float(xsimd::bitwise_cast<VecI>(bytes4) >> 24);  // arithmetic shift
}

// Panel (Dh, 32) of int8 keys -> dst (Dh, 32) floats; scales: the panel's (NBk, 32).
inline void widen_int8_panel(const int8_t* panel, const float* scales, int32_t dh, float* dst) {
  for (int32_t d = 0; d < dh; ++d) {
    const float* sc = scales + (d / 32) * kKeysPerPanel;
    for (int32_t h = 0; h < kKeysPerPanel; h += 16) {
      const simd::VecI8 x = simd::VecI8::load_aligned(panel + int64_t{d} * kKeysPerPanel + h);
      for (int q = 0; q < 4; ++q)
        (int8_values(x, q) * VecF::load_aligned(sc + h + 4 * q)).store_aligned(dst + d * kKeysPerPanel + h + 4 * q);
    }
  }
}

// nk value rows (Dv8 int8 each) -> dst (nk, Dv8) floats; scales: (nk, NBv).
inline void widen_int8_rows(const int8_t* v, const float* scales, int32_t nk, int32_t dv8, int32_t nbv, float* dst) {
  for (int32_t j = 0; j < nk; ++j, v += dv8, dst += dv8, scales += nbv) {
    int32_t c = 0;
    for (; c + 16 <= dv8; c += 16) {
      const simd::VecI8 x = simd::VecI8::load_unaligned(v + c);
      const VecF scale(scales[c / 32]);
      for (int q = 0; q < 4; ++q) (int8_values(x, q) * scale).store_aligned(dst + c + 4 * q);
    }
    if (c < dv8) {  // Dv8 % 16 == 8: the last 8 lanes
      const simd::VecI8 x = simd::load64_zero(v + c);
      const VecF scale(scales[c / 32]);
      for (int q = 0; q < 2; ++q) (int8_values(x, q) * scale).store_aligned(dst + c + 4 * q);
    }
  }
}

}  // namespace
}  // namespace MHA_SIMD_VARIANT
}  // namespace mha
