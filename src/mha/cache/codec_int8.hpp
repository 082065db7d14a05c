// The int8 KV cache codec (docs/spec.md 4.8, ggml's q8_0 layout; interface: codec_float32.hpp): blocks of
// kScaleBlock values along the head dim of one token's KV head row (the last block may be shorter),
// scale = float32(amax) / 127 in float32 (0 when amax is 0), q = x / scale in float32 rounded to nearest even
// and clamped to [-127, 127] (0 when the scale is 0). Read back as float32 q * scale. Only finite values are
// quantized: the cache refuses a block holding inf or NaN before it stores anything (kFiniteOnly,
// KVCache::check_storable). The scales sit where cache_layout.hpp says (key_scale_offset,
// value_scale_offset).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "mha/cache/cache_layout.hpp"

namespace mha {
namespace q8 {

constexpr int32_t kQuantBlock = kScaleBlock;  // values per scale, along the head dim
constexpr int32_t kMaxQ = 127;                // q in [-kMaxQ, kMaxQ]
constexpr int32_t blocks(int32_t dim) { return scale_blocks(dim); }

// The scale of a block of n finite values.
inline float block_scale(const float* x, int32_t n) {
  float amax = 0.0f;
  for (int32_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax / 127.0f;
}

// x quantized with `scale` (block_scale of its block); nearbyint rounds to nearest even (the default mode).
inline int8_t quantize(float x, float scale) {
  if (scale == 0.0f) return 0;
  const float q = std::nearbyint(x / scale);
  return static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, q)));
}

inline float dequantize(int8_t q, float scale) { return float(q) * scale; }

// Quantizes n values (n % kQuantBlock may be nonzero) into q[i * q_stride] and one scale per block into
// scales[nb * scale_stride].
inline void quantize_row(const float* x, int32_t n, int8_t* q, int64_t q_stride, float* scales, int64_t scale_stride) {
  for (int32_t b0 = 0, nb = 0; b0 < n; b0 += kQuantBlock, ++nb) {
    const int32_t len = std::min(kQuantBlock, n - b0);
    const float scale = block_scale(x + b0, len);
    scales[nb * scale_stride] = scale;
    for (int32_t i = 0; i < len; ++i) q[(b0 + i) * q_stride] = quantize(x[b0 + i], scale);
  }
}

// y = x quantized and read back (n values of one token's KV head row; y may be x).
inline void round_row(const float* x, float* y, int32_t n) {
  for (int32_t b0 = 0; b0 < n; b0 += kQuantBlock) {
    const int32_t len = std::min(kQuantBlock, n - b0);
    const float scale = block_scale(x + b0, len);
    for (int32_t i = 0; i < len; ++i) y[b0 + i] = dequantize(quantize(x[b0 + i], scale), scale);
  }
}

}  // namespace q8

struct Int8Codec {
  using Element = int8_t;
  static constexpr int32_t kElementBits = 8 * sizeof(Element);
  static constexpr bool kScaled = true;
  static constexpr bool kTracksSpecials = false;
  static constexpr bool kReadsStored = false;
  static constexpr bool kFiniteOnly = true;
  static constexpr bool kPanelRows8 = false;
  static constexpr int32_t kMaxQ = q8::kMaxQ;

  // scales: key j's NBk scales, P apart (key_scale_offset(j, 0, Dh) of its head).
  static bool encode_key(const float* k, int32_t dh, int8_t* panel, int32_t key, float* scales) {
    int8_t* const column = panel + key;
    q8::quantize_row(k, dh, column, kKeysPerPanel, scales, kKeysPerPanel);
    return false;
  }
  static bool encode_value(const float* v, int32_t dv, int8_t* row, float* scales) {
    q8::quantize_row(v, dv, row, 1, scales, 1);
    return false;
  }
  // int8 elements are read back (q * scale) one by one: the plain definition (the SIMD kernels fold the
  // scale into a block's dot product instead).
  static float key(const int8_t* panels, const float* scales, int32_t j, int32_t d, int32_t dh) {
    return q8::dequantize(panels[key_panel_offset(j, d, dh)], scales[key_scale_offset(j, d, dh)]);
  }
  static float value(const int8_t* rows, const float* scales, int32_t j, int32_t d, int32_t dv8, int32_t dv) {
    return q8::dequantize(rows[int64_t{j} * dv8 + d], scales[value_scale_offset(j, d, dv)]);
  }
  static void round_as_stored(const float* x, float* y, int64_t rows, int32_t dim) {
    for (int64_t r = 0; r < rows; ++r) q8::round_row(x + r * dim, y + r * dim, dim);
  }
  // What a quantization stores (load checks a save against it): a finite scale >= 0 (sign bit clear),
  // values in [-kMaxQ, kMaxQ], all 0 when the scale is 0.
  static bool stored_block_valid(const int8_t* q, int32_t n, uint32_t scale_bits) {
    bool ok = scale_bits < 0x7f800000u;
    for (int32_t d = 0; d < n && ok; ++d) ok = q[d] >= -kMaxQ && (scale_bits != 0 || q[d] == 0);
    return ok;
  }
};

}  // namespace mha
