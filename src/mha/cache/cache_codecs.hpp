// The element codecs of the bfloat16 and int8 KV caches (docs/spec.md 4.8), scalar: the definition that
// the cache's stores, its read back, the scalar decode kernel, the float32 copies of the tiled prefill and
// the save format all go through, so that every path stores and reads the same values.
//   bfloat16: the upper 16 bits of the float32 after rounding to nearest even; NaN stays NaN (quiet, sign
//             kept), values past the largest bfloat16 round to +-inf. Read back exactly: a 16-bit shift.
//   int8 (ggml's q8_0 layout): blocks of kQuantBlock values along the head dim of one token's KV head row
//             (the last block may be shorter), scale = float32(amax) / 127 in float32 (0 when amax is 0),
//             q = x / scale in float32 rounded to nearest even and clamped to [-127, 127] (0 when the
//             scale is 0). Read back as float32 q * scale. Only finite values are quantized: the cache
//             refuses a block holding inf or NaN before it stores anything (kv_cache.hpp, check_storable).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "mha/core/f16.hpp"  // float_bits, bits_float

namespace mha {
namespace bf16 {

inline uint16_t encode(float x) {
  const uint32_t f = f16::float_bits(x);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f | 0x00400000u) >> 16);  // NaN, quiet
  // Nearest even: add half an ulp of the result minus one, plus the result's odd bit (an exact tie rounds
  // up only from an odd result). Finite values past the largest bfloat16 carry into the exponent: +-inf.
  return static_cast<uint16_t>((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
}

inline float decode(uint16_t b) { return f16::bits_float(uint32_t{b} << 16); }

}  // namespace bf16

namespace q8 {

constexpr int32_t kQuantBlock = 32;  // values per scale, along the head dim
constexpr int32_t blocks(int32_t dim) { return (dim + kQuantBlock - 1) / kQuantBlock; }

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
}  // namespace mha
