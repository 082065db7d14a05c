// The float32 KV cache codec: elements stored as given (inf and NaN too), no scales. The codec interface
// every codec_*.hpp follows (cache_codecs.hpp lists them):
//   Element                 the stored element type (a pointer to it addresses the storage)
//   kElementBits            bits of one stored value: 8 * sizeof(Element), or 4 for int4's two per byte
//   kScaled                 a float32 scale per block of kScaleBlock elements (cache_layout.hpp) or none
//   kTracksSpecials         inf/NaN elements are tracked (KVCache::special_from) for the SIMD kernels
//   kReadsStored            read_stored (and so the TS layer's read) gives the elements as stored (float16
//                           bits), not float32
//   kFiniteOnly             the cache refuses a row holding inf or NaN before storing it (check_storable)
//   kPanelRows8             encode8 (SIMD builds) and encode_element exist: 8 tokens' keys are stored a
//                           panel row piece at a time (KVCache::store_keys8)
//   encode_key(k, Dh, panel, key, scales)  one token's key into column `key` of its panel (the panel's
//                                          row 0) and, scaled, its NBk scales (stride P); true when it
//                                          stored an inf/NaN
//   encode_value(v, Dv, row, scales)       one token's value into its row and its NBv scales
//   key(panels, scales, j, d, Dh)          element d of key j as stored, read back as float32
//   value(rows, scales, j, d, Dv8, Dv)     element d of value j
//   round_as_stored(x, y, rows, dim)       y = x stored and read back, `rows` token rows of `dim` floats
//   is_special(e)                          (kTracksSpecials) e is inf or NaN
//   stored_block_valid(q, n, scale bits)   (kScaled) a block and its scale are what encode stores (load)
#pragma once

#include <cstdint>
#include <cstring>

#include "mha/cache/cache_layout.hpp"
#include "mha/core/f16.hpp"  // MHA_F16_SIMD, f16::simd::VecF

namespace mha {

struct Float32Codec {
  using Element = float;
  static constexpr int32_t kElementBits = 8 * sizeof(Element);
  static constexpr bool kScaled = false;
  static constexpr bool kTracksSpecials = false;
  static constexpr bool kReadsStored = false;
  static constexpr bool kFiniteOnly = false;
#if MHA_F16_SIMD
  static constexpr bool kPanelRows8 = true;
#else
  static constexpr bool kPanelRows8 = false;
#endif

  static bool encode_key(const float* k, int32_t dh, float* panel, int32_t key, float*) {
    float* const column = panel + key;
    for (int32_t d = 0; d < dh; ++d) column[d * kKeysPerPanel] = k[d];
    return false;
  }
  static bool encode_value(const float* v, int32_t dv, float* row, float*) {
    std::memcpy(row, v, sizeof(float) * size_t(dv));
    return false;
  }
  static float key(const float* panels, const float*, int32_t j, int32_t d, int32_t dh) {
    return panels[key_panel_offset(j, d, dh)];
  }
  static float value(const float* rows, const float*, int32_t j, int32_t d, int32_t dv8, int32_t) {
    return rows[int64_t{j} * dv8 + d];
  }
  static void round_as_stored(const float* x, float* y, int64_t rows, int32_t dim) {
    if (x != y) std::memmove(y, x, sizeof(float) * size_t(rows * dim));
  }
#if MHA_F16_SIMD
  // 8 floats (elements 0..3 in lo, 4..7 in hi) to 8 adjacent columns of a panel row (16-byte aligned).
  static bool encode8(f16::simd::VecF lo, f16::simd::VecF hi, float* dst) {
    lo.store_aligned(dst);
    hi.store_aligned(dst + 4);
    return false;
  }
#endif
  static float encode_element(float x, bool&) { return x; }
};

}  // namespace mha
