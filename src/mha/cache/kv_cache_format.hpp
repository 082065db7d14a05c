// The saved KV cache format's fixed facts (docs/cache-format.md), for kv_cache_io.cpp alone: the magic,
// the header's fields, the parts of one sequence's tokens, and the writer of load's messages (Why).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "mha/cache/cache_codecs.hpp"
#include "mha/cache/kv_cache_io.hpp"
#include "mha/core/cold.hpp"

namespace mha {
namespace saved_format {

// The format is little-endian; elements are copied in host order, so a big-endian host would write another
// format (no target of this project is one).
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "docs/cache-format.md is little-endian");

// "MHAKV", then CR LF and DOS's end of file (PNG's trick): a transfer in text mode that rewrites line
// endings, or a type/cat that stops at ^Z, changes the magic and so is reported as what it is.
inline constexpr uint8_t kMagic[8] = {'M', 'H', 'A', 'K', 'V', '\r', '\n', 0x1a};

// Byte offsets of the fixed header (docs/cache-format.md, "Layout"); the lengths follow it.
enum Field : int64_t {
  kVersionAt = 8,
  kHeaderBytesAt = 12,
  kDTypeAt = 16,
  kBatchAt = 20,
  kKvHeadsAt = 24,
  kHeadDimAt = 28,
  kValueDimAt = 32,
  kCapacityAt = 36,
  kFlagsAt = 40,
  kReservedAt = 44,
  kLengthsAt = 48,
};
constexpr int64_t kChecksumBytes = 4;
// The oldest version holding a dtype (the table's, cache_codecs.hpp): version 2 added bfloat16 and int8.
inline uint32_t format_version(CacheDType dtype) { return cache_dtype_info(dtype).save_version; }
// Version 3: a ring cache (flags bit 0), its B stored counts after the lengths, any dtype.
constexpr uint32_t kRingVersion = 3;
constexpr uint32_t kRingFlag = 1;
inline uint32_t format_version(const KVCacheConfig& c) {
  return c.ring ? std::max(kRingVersion, format_version(c.dtype)) : format_version(c.dtype);
}
// The header's bytes: the fixed fields, the lengths and a ring's stored counts.
inline int64_t header_bytes(int32_t batch, bool ring) { return kLengthsAt + int64_t{batch} * (ring ? 8 : 4); }

inline uint32_t read_u32(const uint8_t* p) {
  uint32_t x;
  std::memcpy(&x, p, 4);
  return x;
}
inline void write_u32(uint8_t* p, uint32_t x) { std::memcpy(p, &x, 4); }

// One element at a byte address of the save (memcpy: a save's elements need not be aligned in memory).
template <typename E>
inline E load_element(const uint8_t* p) {
  E x;
  std::memcpy(&x, p, sizeof(E));
  return x;
}
template <typename E>
inline void store_element(uint8_t* p, E x) {
  std::memcpy(p, &x, sizeof(E));
}

// ---- Messages: `why` in the API's terms, with numbers (no printf: it would pull musl's formatter into the
// modules). Cold (core/cold.hpp).
struct Why {
  LoadMessage* message;
  MHA_COLD void put(char c) {
    if (message != nullptr && message->length < LoadMessage::kCapacity - 1) {
      message->text[message->length++] = c;
      message->text[message->length] = 0;
    }
  }
  MHA_COLD Why& operator<<(const char* s) {
    while (*s != 0) put(*s++);
    return *this;
  }
  MHA_COLD Why& operator<<(int64_t x) {
    char digits[24];
    int n = 0;
    uint64_t u = x < 0 ? uint64_t{0} - uint64_t(x) : uint64_t(x);
    do digits[n++] = char('0' + u % 10);
    while ((u /= 10) != 0);
    if (x < 0) put('-');
    while (n > 0) put(digits[--n]);
    return *this;
  }
  Why& operator<<(int32_t x) { return *this << int64_t{x}; }
  Why& operator<<(uint32_t x) { return *this << int64_t{x}; }
  MHA_COLD Why& hex(uint32_t x) {
    *this << "0x";
    for (int shift = 28; shift >= 0; shift -= 4) put("0123456789abcdef"[(x >> shift) & 0xf]);
    return *this;
  }
};

inline const char* dtype_name(CacheDType dtype) { return cache_dtype_info(dtype).name; }
// Bytes of one KV head's row of `dim` values in a save: dim elements, int4's rounded up to a byte.
inline int64_t head_row_bytes(CacheDType dtype, int32_t dim) { return cache_saved_row_bytes(dtype, dim); }

// Bytes of one token's k and v over all KV heads: Hkv rows of Dh and of Dv elements (scaled dtypes: and their
// float32 scales, Hkv * (NBk + NBv)), up to 2^69 for int32 dims: a double, exact below 2^53 (and for a
// cache that exists, below 2^31).
inline double token_bytes(const KVCacheConfig& c) {
  const double scales =
      cache_dtype_info(c.dtype).scaled ? 4.0 * (scale_blocks(c.head_dim) + scale_blocks(c.value_dim())) : 0.0;
  return double(c.num_kv_heads) *
         (double(head_row_bytes(c.dtype, c.head_dim)) + double(head_row_bytes(c.dtype, c.value_dim())) + scales);
}

// One sequence's part of a save: k (L, Hkv*Dh) and v (L, Hkv*Dv) elements (int4: each head's row of Dh or Dv
// values in ceil(Dh / 2) or ceil(Dv / 2) bytes), then for int8 and int4 (scaled) the scales,
// k's (L, Hkv*NBk) and v's (L, Hkv*NBv) float32 (docs/cache-format.md). Byte offsets from its start.
struct SequenceParts {
  int64_t k_row, v_row, k_scale_row, v_scale_row;  // bytes per token
  int64_t v_at, k_scales_at, v_scales_at, end;
};
inline SequenceParts sequence_parts(const KVCacheConfig& c, int32_t length) {
  const int64_t hkv = c.num_kv_heads;
  const bool scaled = cache_dtype_info(c.dtype).scaled;
  SequenceParts p;
  p.k_row = hkv * head_row_bytes(c.dtype, c.head_dim), p.v_row = hkv * head_row_bytes(c.dtype, c.value_dim());
  p.k_scale_row = scaled ? hkv * scale_blocks(c.head_dim) * 4 : 0,
  p.v_scale_row = scaled ? hkv * scale_blocks(c.value_dim()) * 4 : 0;
  p.v_at = length * p.k_row;
  p.k_scales_at = p.v_at + length * p.v_row;
  p.v_scales_at = p.k_scales_at + length * p.k_scale_row;
  p.end = p.v_scales_at + length * p.v_scale_row;
  return p;
}

}  // namespace saved_format
}  // namespace mha
