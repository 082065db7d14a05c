// The float16 KV cache codec (interface: codec_float32.hpp): binary16 bits, rounded to nearest even with
// core/f16.hpp's scalar and SIMD encoders (the float16 tensors' too), read back exactly. inf and NaN are
// stored, and tracked (kTracksSpecials): the SIMD kernels skip the inf/NaN fix-up of the widening when the
// keys they read hold none.
#pragma once

#include <cstdint>

#include "mha/cache/cache_layout.hpp"
#include "mha/core/f16.hpp"

namespace mha {

// y[i] = x[i] rounded to binary16 and widened back, exactly the value a float16 cache stores for x[i]
// (count elements; x and y may be the same). kv_cache.cpp.
void round_to_f16(const float* x, float* y, int64_t count);

struct Float16Codec {
  using Element = uint16_t;
  static constexpr int32_t kElementBits = 8 * sizeof(Element);
  static constexpr bool kScaled = false;
  static constexpr bool kTracksSpecials = true;
  static constexpr bool kReadsStored = true;
  static constexpr bool kFiniteOnly = false;
#if MHA_F16_SIMD
  static constexpr bool kPanelRows8 = true;
#else
  static constexpr bool kPanelRows8 = false;
#endif

  // The cache's float16 rounding, each in one place (noinline): every store path calls these instead of
  // carrying its own inlined copy of f16's SIMD narrowing. The copy-in is O(n * Hkv * Dh) per call, beside
  // attention's O(n * T * H * Dh), so a call per 8 elements should not show (not timed);
  // mha-relaxed-threads.wasm is 401 B (zlib -9) smaller for it (package size, issue #15).
  [[gnu::noinline]] static uint16_t encode_element(float x, bool& specials) {
    const uint16_t h = f16::encode(x);
    specials |= f16::is_special(h);
    return h;
  }
#if MHA_F16_SIMD
  // 8 floats (elements 0..3 in lo, 4..7 in hi) -> 8 halves at `halves` (16-byte aligned); true if one is
  // inf/NaN.
  [[gnu::noinline]] static bool encode8(f16::simd::VecF lo, f16::simd::VecF hi, uint16_t* halves) {
    return f16::simd::store8(lo, hi, halves);
  }
#endif

  static bool encode_key(const float* k, int32_t dh, uint16_t* panel, int32_t key, float*) {
    uint16_t* const column = panel + key;
    bool specials = false;
    for (int32_t d = 0; d < dh; ++d) column[d * kKeysPerPanel] = encode_element(k[d], specials);
    return specials;
  }
  static bool encode_value(const float* v, int32_t dv, uint16_t* row, float*) {
    bool specials = false;
    int32_t d = 0;
#if MHA_F16_SIMD
    for (; d + 8 <= dv; d += 8) {
      const auto lo = f16::simd::VecF::load_unaligned(v + d), hi = f16::simd::VecF::load_unaligned(v + d + 4);
      specials |= encode8(lo, hi, row + d);
    }
#endif
    for (; d < dv; ++d) row[d] = encode_element(v[d], specials);
    return specials;
  }
  static float key(const uint16_t* panels, const float*, int32_t j, int32_t d, int32_t dh) {
    return f16::decode(panels[key_panel_offset(j, d, dh)]);
  }
  static float value(const uint16_t* rows, const float*, int32_t j, int32_t d, int32_t dv8, int32_t) {
    return f16::decode(rows[int64_t{j} * dv8 + d]);
  }
  static void round_as_stored(const float* x, float* y, int64_t rows, int32_t dim) { round_to_f16(x, y, rows * dim); }
  static bool is_special(uint16_t h) { return f16::is_special(h); }
};

}  // namespace mha
