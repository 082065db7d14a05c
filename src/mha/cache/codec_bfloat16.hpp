// The bfloat16 KV cache codec (docs/spec.md 4.8; interface: codec_float32.hpp): the upper 16 bits of the
// float32 after rounding to nearest even; NaN stays NaN (quiet, sign kept), values past the largest
// bfloat16 round to +-inf. Read back exactly: a 16-bit shift (so no inf/NaN tracking either).
#pragma once

#include <cstdint>

#include "mha/cache/cache_layout.hpp"
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

struct BFloat16Codec {
  using Element = uint16_t;
  static constexpr int32_t kElementBits = 8 * sizeof(Element);
  static constexpr bool kScaled = false;
  static constexpr bool kTracksSpecials = false;
  static constexpr bool kReadsStored = false;
  static constexpr bool kFiniteOnly = false;
  static constexpr bool kPanelRows8 = false;

  static bool encode_key(const float* k, int32_t dh, uint16_t* panel, int32_t key, float*) {
    uint16_t* const column = panel + key;
    for (int32_t d = 0; d < dh; ++d) column[d * kKeysPerPanel] = bf16::encode(k[d]);
    return false;
  }
  static bool encode_value(const float* v, int32_t dv, uint16_t* row, float*) {
    for (int32_t d = 0; d < dv; ++d) row[d] = bf16::encode(v[d]);
    return false;
  }
  static float key(const uint16_t* panels, const float*, int32_t j, int32_t d, int32_t dh) {
    return bf16::decode(panels[key_panel_offset(j, d, dh)]);
  }
  static float value(const uint16_t* rows, const float*, int32_t j, int32_t d, int32_t dv8, int32_t) {
    return bf16::decode(rows[int64_t{j} * dv8 + d]);
  }
  static void round_as_stored(const float* x, float* y, int64_t rows, int32_t dim) {
    for (int64_t i = 0, count = rows * dim; i < count; ++i) y[i] = bf16::decode(bf16::encode(x[i]));
  }
};

}  // namespace mha
