// Saving a KV cache as bytes and loading it back (docs/spec.md 4.7; the byte layout, the checks and the
// versioning policy are docs/cache-format.md). A save holds the config, the B lengths and only the stored
// tokens, per sequence b: k (lengths[b], Hkv*Dh) then v (lengths[b], Hkv*Dv) in the cache's own elements
// (exactly read_stored's layout), then a CRC-32 of every byte before it.
//
// Loading reads untrusted bytes: every field, the exact size and the checksum are checked before anything
// is allocated, no byte outside [bytes, bytes + size) is read, and every refusal says why in the API's
// terms (option names), for the RangeError of mha.loadKVCache.
#pragma once

#include <cstdint>
#include <memory>

#include "mha/cache/kv_cache.hpp"
#include "mha/core/shape.hpp"

namespace mha {

// The versions this build reads (docs/cache-format.md, "Versions"): 1 holds float32 and float16 caches,
// 2 adds bfloat16 and int8, 3 ring caches (their stored counts after the lengths), 4 int4 (ring or not). A
// save is written in the oldest version that holds it, so that float32 and float16 saves stay readable by
// builds that know only version 1.
constexpr uint32_t kCacheFormatFirstVersion = 1;
constexpr uint32_t kCacheFormatVersion = 4;

// CRC-32 of IEEE 802.3 (zlib's crc32, reflected polynomial 0xEDB88320) of `size` bytes, continuing from
// `crc` (0 to start): crc32("123456789") = 0xCBF43926.
uint32_t crc32(const uint8_t* data, int64_t size, uint32_t crc = 0);

// Why a load refused its bytes, in the API's terms: a NUL-terminated message in a fixed buffer (longer ones
// are cut), so that neither a refusal nor the bindings' copy of it allocates, and no string code of libc++
// is linked into the modules for it.
struct LoadMessage {
  static constexpr int kCapacity = 400;
  char text[kCapacity] = {};
  int length = 0;
  bool empty() const { return length == 0; }
  void clear() { text[length = 0] = 0; }
};

// What a save's header says, once every check of load has passed (nothing allocated: the lengths are read
// from the input).
struct SavedCacheHeader {
  KVCacheConfig config;  // of the cache to create: capacity is the requested one
  int32_t saved_capacity = 0;
  int32_t max_length = 0;            // the longest saved sequence
  const uint8_t* lengths = nullptr;  // (B) little-endian int32, inside the input
  const uint8_t* stored = nullptr;   // a ring's (B) stored counts, inside the input; null: every token stored
  int64_t tokens_offset = 0;         // where sequence 0's k starts
  int32_t length(int32_t b) const;
  // The tokens saved of sequence b: those at positions [length(b) - count(b), length(b)).
  int32_t count(int32_t b) const;
};

// Reaches KVCache's storage through its storage accessors (key_panels, value_rows, their writable twins for
// load): the panels and rows are copied as whole panel rows and value rows, never element by element through
// key() / value(). Each dtype's elements and scales are its codec's (cache_codecs.hpp).
class KVCacheStorage {
 public:
  // Bytes save() writes for this cache: the header, the stored tokens and the checksum.
  static int64_t saved_bytes(const KVCache& cache);
  // Writes the save to dst, exactly saved_bytes(cache) of them (kNullPointer for a null dst,
  // kCacheBadLength for another size).
  static Status save(const KVCache& cache, uint8_t* dst, int64_t size);

  // Every check of load, without allocating the cache: kOk and the header, or a status and *why.
  // capacity: of the new cache, 0 = the saved one.
  //   kCacheBadSave    the bytes are not exactly what some save() wrote (magic, version, a field, the size,
  //                    the checksum)
  //   kNonPositiveDim  capacity < 0
  //   kCacheBadLength  capacity (given) below the longest saved sequence
  //   kCacheTooLarge   the cache would not fit the 4 GiB heap (kMaxCacheBytes)
  static Status check(const uint8_t* bytes, int64_t size, int32_t capacity, SavedCacheHeader& header, LoadMessage* why);
  // check(), then a new cache holding the saved tokens (and kOutOfMemory when the heap cannot hold it), of
  // integer arithmetic when `integer` (kCacheBadArithmetic unless the save is int8 or int4: arithmetic is the
  // loader's choice, not the save's). `out` is null unless kOk. A float16 cache's special_from is
  // recomputed from its halves.
  static Status load(const uint8_t* bytes, int64_t size, int32_t capacity, std::unique_ptr<KVCache>& out,
                     LoadMessage* why, bool integer = false);
};

}  // namespace mha
