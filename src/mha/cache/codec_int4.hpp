// The int4 KV cache codec (docs/spec.md 5.1, ggml's q4_0 without its offset; interface: codec_float32.hpp):
// blocks of kScaleBlock values along the head dim of one token's KV head row, as for int8, with
// scale = float32(amax) / 7 (0 when amax is 0) and q = x / scale rounded to nearest even, clamped to [-7, 7]
// (0 when the scale is 0). Read back as float32 q * scale. Finite values only (kFiniteOnly), as int8.
// q is stored as a two's complement nibble, two per byte, so that zero-filled storage reads as 0:
//   K panel row d (32 keys, 16 bytes): key c at byte c % 16, the high nibble for c >= 16, so one 16-byte
//     load splits into keys 0..15 (low nibbles) and 16..31 (high nibbles) in order, with no shuffle;
//   V row (Dv8 lanes, Dv8 / 2 bytes): lanes 2i and 2i + 1 in byte i (low, high), which is also the saved
//     format's order (docs/cache-format.md), so a row is saved as its first ceil(Dv / 2) bytes.
// Element offsets (cache_layout.hpp) count nibbles; every panel row and value row starts on a byte.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "mha/cache/cache_layout.hpp"

namespace mha {
namespace q4 {

constexpr int32_t kMaxQ = 7;  // q in [-kMaxQ, kMaxQ]

inline float block_scale(const float* x, int32_t n) {
  float amax = 0.0f;
  for (int32_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax / 7.0f;
}

inline int32_t quantize(float x, float scale) {
  if (scale == 0.0f) return 0;
  const float q = std::nearbyint(x / scale);  // nearest even (the default mode)
  return static_cast<int32_t>(std::min(7.0f, std::max(-7.0f, q)));
}

// The nibble `high` of byte b as a signed integer in [-8, 7] (-8 is never stored).
inline int32_t nibble(uint8_t b, bool high) {
  return static_cast<int32_t>(static_cast<int8_t>(high ? b : b << 4)) >> 4;
}
inline void set_nibble(uint8_t& b, bool high, int32_t q) {
  const uint8_t code = static_cast<uint8_t>(q) & 0x0f;
  b = high ? static_cast<uint8_t>((b & 0x0f) | (code << 4)) : static_cast<uint8_t>((b & 0xf0) | code);
}

// Where element d of key j sits among one KV head's key panels: its byte and whether it is the high nibble.
struct NibbleAt {
  int64_t byte;
  bool high;
};
constexpr NibbleAt key_nibble(int32_t j, int32_t d, int32_t head_dim) {
  const int64_t row = key_panel_offset(j, d, head_dim) / kKeysPerPanel;  // panel rows before it
  const int32_t c = j % kKeysPerPanel;
  return {row * (kKeysPerPanel / 2) + c % 16, c >= 16};
}
constexpr NibbleAt value_nibble(int32_t j, int32_t d, int32_t dv8) {
  const int64_t lane = int64_t{j} * dv8 + d;
  return {lane / 2, lane % 2 != 0};
}

}  // namespace q4

struct Int4Codec {
  using Element = uint8_t;  // two values
  static constexpr int32_t kElementBits = 4;
  static constexpr bool kScaled = true;
  static constexpr bool kTracksSpecials = false;
  static constexpr bool kReadsStored = false;
  static constexpr bool kFiniteOnly = true;
  static constexpr bool kPanelRows8 = false;
  static constexpr int32_t kMaxQ = q4::kMaxQ;

  // panel: the key's panel (its row 0), column: the key's index in it; scales: its NBk scales, P apart.
  static bool encode_key(const float* k, int32_t dh, uint8_t* panel, int32_t column, float* scales) {
    for (int32_t b0 = 0, nb = 0; b0 < dh; b0 += kScaleBlock, ++nb) {
      const int32_t len = std::min(kScaleBlock, dh - b0);
      const float scale = q4::block_scale(k + b0, len);
      scales[nb * kKeysPerPanel] = scale;
      for (int32_t d = b0; d < b0 + len; ++d) {
        const q4::NibbleAt at = q4::key_nibble(column, d, dh);
        q4::set_nibble(panel[at.byte], at.high, q4::quantize(k[d], scale));
      }
    }
    return false;
  }
  // row: the value's row (Dv8 lanes from a byte); lanes [Dv, Dv8) stay zero.
  static bool encode_value(const float* v, int32_t dv, uint8_t* row, float* scales) {
    for (int32_t b0 = 0, nb = 0; b0 < dv; b0 += kScaleBlock, ++nb) {
      const int32_t len = std::min(kScaleBlock, dv - b0);
      const float scale = q4::block_scale(v + b0, len);
      scales[nb] = scale;
      for (int32_t d = b0; d < b0 + len; ++d) q4::set_nibble(row[d / 2], d % 2 != 0, q4::quantize(v[d], scale));
    }
    return false;
  }
  static float key(const uint8_t* panels, const float* scales, int32_t j, int32_t d, int32_t dh) {
    const q4::NibbleAt at = q4::key_nibble(j, d, dh);
    return float(q4::nibble(panels[at.byte], at.high)) * scales[key_scale_offset(j, d, dh)];
  }
  static float value(const uint8_t* rows, const float* scales, int32_t j, int32_t d, int32_t dv8, int32_t dv) {
    const q4::NibbleAt at = q4::value_nibble(j, d, dv8);
    return float(q4::nibble(rows[at.byte], at.high)) * scales[value_scale_offset(j, d, dv)];
  }
  static void round_as_stored(const float* x, float* y, int64_t rows, int32_t dim) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* in = x + r * dim;
      float* out = y + r * dim;
      for (int32_t b0 = 0; b0 < dim; b0 += kScaleBlock) {
        const int32_t len = std::min(kScaleBlock, dim - b0);
        const float scale = q4::block_scale(in + b0, len);
        for (int32_t i = b0; i < b0 + len; ++i) out[i] = float(q4::quantize(in[i], scale)) * scale;
      }
    }
  }
  // A saved block (n values from a byte, pairs low nibble first): a finite scale >= 0 (sign bit clear),
  // values in [-kMaxQ, kMaxQ], all 0 when the scale is 0, and the unused high nibble of an odd block 0.
  static bool stored_block_valid(const uint8_t* q, int32_t n, uint32_t scale_bits) {
    bool ok = scale_bits < 0x7f800000u;
    for (int32_t d = 0; d < n && ok; ++d) {
      const int32_t x = q4::nibble(q[d / 2], d % 2 != 0);
      ok = x >= -kMaxQ && (scale_bits != 0 || x == 0);
    }
    return ok && (n % 2 == 0 || (q[n / 2] & 0xf0) == 0);
  }
};

}  // namespace mha
