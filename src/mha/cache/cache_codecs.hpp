// The KV cache dtypes: one table (MHA_CACHE_DTYPES), one codec per dtype (codec_*.hpp, their interface in
// codec_float32.hpp). The CacheDType enum, its validity, the element and scale bytes, the cache's storage,
// key() / value() / read, the scalar decode kernel's element read, save / load's dtype checks and messages,
// and the TypeScript layer's names (scripts/gen-cache-dtypes.mjs writes web/src/cache-dtypes.generated.ts
// from this table) all come from here. Adding a dtype: a codec file, a row here, its tests.
#pragma once

#include <cstdint>

#include "mha/cache/codec_bfloat16.hpp"
#include "mha/cache/codec_float16.hpp"
#include "mha/cache/codec_float32.hpp"
#include "mha/cache/codec_int4.hpp"
#include "mha/cache/codec_int8.hpp"

// X(number, enumerator, "name", Codec, save version, integer): number is the ABI's and the save format's
// (docs/cache-format.md); save version is the oldest version of the saved format that holds the dtype;
// integer is 1 where the dtype takes integer arithmetic (docs/spec.md 5.1). Numbers run 0, 1, 2, ... in
// this order.
#define MHA_CACHE_DTYPES(X)                        \
  X(0, kFloat32, "float32", Float32Codec, 1, 0)    \
  X(1, kFloat16, "float16", Float16Codec, 1, 0)    \
  X(2, kBFloat16, "bfloat16", BFloat16Codec, 2, 0) \
  X(3, kInt8, "int8", Int8Codec, 2, 1)             \
  X(4, kInt4, "int4", Int4Codec, 4, 1)

namespace mha {

enum class CacheDType : int32_t {
#define MHA_CACHE_DTYPE_ENUM(number, id, name, Codec, version, integer) id = number,
  MHA_CACHE_DTYPES(MHA_CACHE_DTYPE_ENUM)
#undef MHA_CACHE_DTYPE_ENUM
};

#define MHA_CACHE_DTYPE_COUNT(number, id, name, Codec, version, integer) +1
constexpr int32_t kCacheDTypeCount = 0 MHA_CACHE_DTYPES(MHA_CACHE_DTYPE_COUNT);
#undef MHA_CACHE_DTYPE_COUNT

// f(Codec{}) for the codec of `dtype`, which must be valid (cache_dtype_valid): one switch for every
// dispatch on the dtype.
template <typename F>
inline decltype(auto) visit_codec(CacheDType dtype, F&& f) {
  switch (dtype) {
#define MHA_CACHE_DTYPE_CASE(number, id, name, Codec, version, integer) \
  case CacheDType::id: return f(Codec{});
    MHA_CACHE_DTYPES(MHA_CACHE_DTYPE_CASE)
#undef MHA_CACHE_DTYPE_CASE
  }
  return f(Float32Codec{});  // not a dtype: callers validate first
}

constexpr bool cache_dtype_valid(CacheDType dtype) {
  return static_cast<uint32_t>(dtype) < static_cast<uint32_t>(kCacheDTypeCount);
}

// What the table says of a dtype, as data (messages, save / load).
struct CacheDTypeInfo {
  const char* name;
  int32_t element_bits;   // one stored value (the scales aside): 4 for int4's two per byte
  bool scaled;            // a float32 scale per kScaleBlock elements of a token's key and value
  bool tracks_specials;   // KVCache::special_from is kept
  bool reads_stored;      // read_stored gives the stored elements
  bool finite_only;       // append refuses inf and NaN
  bool panel_rows8;       // append stores 8 tokens' keys a panel row piece at a time
  uint32_t save_version;  // the oldest saved-format version that holds it
  bool integer;           // takes integer arithmetic (docs/spec.md 5.1)
};
constexpr CacheDTypeInfo kCacheDTypes[] = {
#define MHA_CACHE_DTYPE_INFO(number, id, name, Codec, version, integer) \
  {name,                                                                \
   Codec::kElementBits,                                                 \
   Codec::kScaled,                                                      \
   Codec::kTracksSpecials,                                              \
   Codec::kReadsStored,                                                 \
   Codec::kFiniteOnly,                                                  \
   Codec::kPanelRows8,                                                  \
   version,                                                             \
   integer != 0},
    MHA_CACHE_DTYPES(MHA_CACHE_DTYPE_INFO)
#undef MHA_CACHE_DTYPE_INFO
};
// The dtype's row of the table; a valid dtype (cache_dtype_valid).
constexpr const CacheDTypeInfo& cache_dtype_info(CacheDType dtype) { return kCacheDTypes[static_cast<int32_t>(dtype)]; }

// Bytes of `count` stored values (the scales aside); count is even for int4 (every panel row and value
// row starts on a byte).
constexpr int64_t cache_elements_bytes(CacheDType dtype, int64_t count) {
  return count * cache_dtype_info(dtype).element_bits / 8;
}
// Bytes of a row of `dim` values as saved (docs/cache-format.md): int4 rounds up to a byte.
constexpr int64_t cache_saved_row_bytes(CacheDType dtype, int64_t dim) {
  return (dim * cache_dtype_info(dtype).element_bits + 7) / 8;
}

// Element d of key / value j of one KV head as stored, read back as float32 (its panels or rows, and its
// scales: null for unscaled dtypes). The one element read of the cache (KVCache::key) and the scalar decode
// kernel.
inline float read_key(CacheDType dtype, const void* panels, const float* scales, int32_t j, int32_t d, int32_t dh) {
  return visit_codec(dtype, [&](auto codec) {
    using C = decltype(codec);
    return C::key(static_cast<const typename C::Element*>(panels), scales, j, d, dh);
  });
}
inline float read_value(CacheDType dtype, const void* rows, const float* scales, int32_t j, int32_t d, int32_t dv8,
                        int32_t dv) {
  return visit_codec(dtype, [&](auto codec) {
    using C = decltype(codec);
    return C::value(static_cast<const typename C::Element*>(rows), scales, j, d, dv8, dv);
  });
}

}  // namespace mha
