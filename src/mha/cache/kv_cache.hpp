// The KV cache of docs/spec.md Part 3: the keys and values of every token so far, stored once on the
// heap and appended in place. Each batch item (sequence) has its own length (docs/spec.md 4.6): a batch of
// prompts of different lengths is prefilled and decoded together, each sequence's keys ending at its own
// length.
//
// Layout, per batch item b and KV head g (P = kKeysPerPanel = 32, Dv8 = Dv rounded up to 8):
//   K  (B, Hkv, ceil(capacity / P), Dh, P)   K^T in panels of 32 keys: row d of a panel holds element d
//                                            of 32 consecutive keys (with rope: rotated at their position)
//   V  (B, Hkv, capacity, Dv8)               one row per key, lanes [Dv, Dv8) zero
// Why this layout: the decode kernel (decode.hpp) runs, for one KV head, the G*n query rows that share
// it against a block of keys. With K^T panels, one step of the QK^T micro-kernel loads 8 to 32
// consecutive keys of one head-dim element as whole vectors and broadcasts a q element over them: the
// scores come out as vectors over keys, which is what the softmax works on, with no horizontal sums.
// With V in rows, the PV micro-kernel broadcasts a weight over a row's lanes. Both K and V of a key block
// are then single linear streams (the prefetchers' best case), a panel row of an f16 cache is exactly one
// 64-byte line, and head g's keys never interleave with other heads'. Appending writes Dh scattered
// elements per token and head into K and one row into V: O(n * Hkv * Dh). Truncating only moves
// the lengths. Nothing is ever copied in proportion to the length.
// The tiled prefill kernel (kernel.hpp) reads K as rows through strides, so it cannot read these
// panels; a prefill into an empty cache runs it on the new tokens' own k and v instead (float16: rounded
// with round_to_f16; see decode.hpp). Reading panels there would need its K packing to copy 8-key panel
// rows.
//
// float16, bfloat16: 16-bit elements in the same layout. Unused storage is zero, and inf/NaN halves of a
// float16 cache are tracked (special_from) so that the kernels can skip the inf/NaN fix-up of the
// widening when the keys they read hold none (a bfloat16 widening is exact for every value).
// int8 (docs/spec.md 4.8, codec_int8.hpp): int8 elements in the same layout, and a float32 scale per
// block of 32 head-dim elements of each token's key and value (cache_layout.hpp, key_scale_offset and
// value_scale_offset):
//   key scales    (B, Hkv, ceil(capacity / P), NBk, P)   NBk = ceil(Dh / 32): a panel's keys' scales in
//                                                         rows of P, so one row scales a panel row's keys
//   value scales  (B, Hkv, capacity, NBv)                NBv = ceil(Dv / 32)
// The decode kernels fold a scale into a block's dot product and into a key's weight (one multiply per
// block), never into each value.
// Each dtype's encoding, read back and scales are its codec's (cache_codecs.hpp: the table of dtypes).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "mha/cache/cache_codecs.hpp"
#include "mha/cache/cache_layout.hpp"
#include "mha/core/numeric.hpp"
#include "mha/core/shape.hpp"

namespace mha {

struct KVCacheConfig {
  int32_t batch = 0;         // B
  int32_t num_kv_heads = 0;  // Hkv
  int32_t head_dim = 0;      // Dh
  int32_t capacity = 0;      // tokens per batch item
  CacheDType dtype = CacheDType::kFloat32;
  int32_t v_head_dim = 0;  // Dv; 0 = Dh (docs/spec.md 4.1)
  // A ring (docs/spec.md 5.5): each sequence keeps its last `capacity` tokens, position p in slot
  // p % capacity, and appending past the capacity overwrites the oldest.
  bool ring = false;
  // Integer arithmetic (docs/spec.md 5.1; int8 and int4 only): attends take exact integer dot products over
  // the stored integers (decode_integer.hpp), bit-identical in every kernel variant.
  bool integer = false;

  int32_t value_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }  // Dv
};

// A wasm32 heap holds at most 4 GiB (the modules' MAXIMUM_MEMORY, docs/spec.md 5.6); natively the same
// bound keeps the behaviour of both builds alike.
constexpr int64_t kMaxCacheBytes = int64_t{1} << 32;
// special_from() when the cache holds no inf or NaN half.
constexpr int32_t kNoSpecialValues = INT32_MAX;

// Bytes of K and V storage of a config (exactly what create allocates, int8 scales included), or -1 when
// a dim is not positive or the dtype is unknown. Exact for every int32 dims (at most about 2^95 bytes, as a double).
double kv_cache_bytes(const KVCacheConfig& config);

// kNonPositiveDim, kBadVHeadDim (value_dim < 0), kCacheBadDType (dtype), kCacheBadArithmetic (integer
// arithmetic on a dtype other than int8 and int4), kCacheTooLarge (kMaxCacheBytes or more: the
// heap also holds everything else), or kOk.
Status validate_cache_config(const KVCacheConfig& config);

// y = x as a cache of `dtype` stores and reads it back: `rows` rows of `dim` floats, each one token's KV
// head row (an int8 block never spans two rows). x and y may be the same; float32 copies. (float16:
// round_to_f16, codec_float16.hpp.)
void round_as_stored(CacheDType dtype, const float* x, float* y, int64_t rows, int32_t dim);

// What the decode kernels read of one KV head (the first fields of decode_kernel.hpp's DecodeBlock), from
// KVCache::head_block.
struct CacheHeadBlock {
  // The KV head: panels from panel 0, value rows from row 0 (layout above), elements of the dtype's codec.
  const void* key_panels = nullptr;  // float, uint16_t or int8_t (dtype)
  const void* value_rows = nullptr;
  // Scaled dtypes (int8): the scales of the head's keys (panels, NBk, P) and values (capacity, NBv); else null.
  const float* key_scales = nullptr;
  const float* value_scales = nullptr;
  CacheDType dtype = CacheDType::kFloat32;
  bool integer = false;   // the cache's integer arithmetic (KVCacheConfig::integer)
  bool specials = false;  // float16: the keys before key_end may hold inf/NaN halves (the SIMD
                          // kernel then hands the block to the scalar one)
};

struct CacheSequenceSpan;  // where one sequence's storage lies (kv_cache_reorder.cpp)

class KVCache {
 public:
  // Validates the config and allocates zero-filled storage; kOutOfMemory when the heap cannot hold it.
  static Status create(const KVCacheConfig& config, std::unique_ptr<KVCache>& cache);
  ~KVCache();
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

  const KVCacheConfig& config() const { return config_; }
  // Sequence b's length (tokens appended: the next position), and the extremes over the B sequences.
  int32_t length(int32_t b) const { return lengths_[b]; }
  const int32_t* lengths() const { return lengths_; }  // (B)
  // Tokens sequence b holds, those at positions [length(b) - stored(b), length(b)): length(b) unless a
  // ring dropped some.
  int32_t stored(int32_t b) const { return stored_[b]; }
  const int32_t* stored_counts() const { return stored_; }  // (B)
  // Where position p of a sequence is stored: its key column and value row (p itself unless a ring).
  int32_t slot(int32_t position) const { return config_.ring ? position % config_.capacity : position; }
  // Slots [0, slot_extent(b)) of sequence b hold its tokens: its length, or a ring's capacity once full.
  int32_t slot_extent(int32_t b) const { return config_.ring ? std::min(lengths_[b], config_.capacity) : lengths_[b]; }
  int32_t min_length() const;
  int32_t max_length() const;
  bool uniform() const { return min_length() == max_length(); }

  // Stores the new tokens of sequence b at positions [length(b), length(b) + count_b) and adds count_b to
  // its length, count_b = new_tokens[b] (new_tokens null: n for every b; else each in [0, n], checked by
  // the caller). k (B, n, Hkv*Dh), v (B, n, Hkv*Dv) through strides (head g of a row at g*Dh, g*Dv); rows
  // at index >= count_b are padding and not read. With rope (not null, enabled, validated against Dh by
  // the caller) each key is rotated at its position first, then stored (float16: rounded after the
  // rotation). kCacheFull when a sequence would pass the capacity, kRopePosition when one would pass the
  // rope tables' rows, kCacheNonFinite when an int8 cache would quantize an inf or NaN (check_storable):
  // then nothing is written. float16 and bfloat16 caches round to nearest even, int8 quantizes
  // (cache_codecs.hpp).
  Status append(TensorView<const float> k, TensorView<const float> v, int32_t n, const RotaryTables* rope = nullptr,
                const int32_t* new_tokens = nullptr);

  // kCacheNonFinite when the cache's dtype stores only finite values (int8: kFiniteOnly) and a real row
  // of k or v (keys after the rotation) holds an inf or NaN: docs/spec.md 4.8 refuses the call before
  // anything is stored. kOk otherwise, and for the other dtypes (which store inf and NaN). Arguments as append's,
  // already checked against the capacity.
  Status check_storable(TensorView<const float> k, TensorView<const float> v, int32_t n, const RotaryTables* rope,
                        const int32_t* new_tokens);

  // Keeps min(length(b), length) tokens of every sequence; kCacheBadLength when length < 0 or
  // > max_length(), or a ring would remove more than it stores. O(B).
  Status truncate(int32_t length);
  // Sets sequence b's length to lengths[b] (B of them, each in [0, length(b)], and a ring's at least
  // length(b) - stored(b), else kCacheBadLength and nothing changes). O(B).
  Status truncate_each(const int32_t* lengths);

  // Beam search (docs/spec.md 5.4): afterwards sequence b holds what sequence indices[b] held (its tokens,
  // length and special_from); an index may repeat or be left out. Copies only the sequences that change,
  // and of each only the panels and rows of its tokens: O(bytes moved). A cycle of sequences (a swap) goes
  // through one buffer of its first sequence's tokens. kCacheBadIndices unless every index is in [0, B),
  // kOutOfMemory when that buffer cannot be had: then nothing changed. (kv_cache_reorder.cpp)
  Status reorder(const int32_t* indices);

  // Storage of KV head g of batch item b, for the kernels and save: the codec's Element (float for
  // kFloat32, uint16_t for kFloat16 and kBFloat16, int8_t for kInt8, uint8_t (two values) for kInt4), and a scaled
  // cache's scales (layout above; nullptr for other dtypes).
  template <typename E>
  const E* key_panels(int32_t b, int32_t g) const {
    return reinterpret_cast<const E*>(
        static_cast<const char*>(keys_) +
        cache_elements_bytes(config_.dtype, head_index(b, g) * panels_ * panel_elements()));
  }
  template <typename E>
  const E* value_rows(int32_t b, int32_t g) const {
    return reinterpret_cast<const E*>(
        static_cast<const char*>(values_) +
        cache_elements_bytes(config_.dtype, head_index(b, g) * config_.capacity * value_row_elements()));
  }
  const float* key_scales(int32_t b, int32_t g) const {
    return key_scales_ == nullptr ? nullptr
                                  : key_scales_ + head_index(b, g) * panels_ * key_scale_blocks() * kKeysPerPanel;
  }
  const float* value_scales(int32_t b, int32_t g) const {
    return value_scales_ == nullptr ? nullptr
                                    : value_scales_ + head_index(b, g) * config_.capacity * value_scale_blocks();
  }
  int32_t key_scale_blocks() const { return scale_blocks(config_.head_dim); }           // NBk
  int32_t value_scale_blocks() const { return scale_blocks(config_.value_dim()); }      // NBv
  int64_t panel_elements() const { return int64_t{config_.head_dim} * kKeysPerPanel; }  // (Dh, P)
  int32_t value_row_elements() const { return round_up(config_.value_dim(), 8); }       // Dv8
  // KV head g of sequence b for a decode block of keys ending before key_end (decode_run.cpp).
  CacheHeadBlock head_block(int32_t b, int32_t g, int32_t key_end) const;

  // For load (kv_cache_io.hpp), which fills a new cache: the same storage, writable, and a sequence's
  // length and special_from once its tokens are written (special_from exact or conservative: the first
  // position holding an inf or NaN half, or kNoSpecialValues).
  template <typename E>
  E* writable_key_panels(int32_t b, int32_t g) {
    return const_cast<E*>(key_panels<E>(b, g));
  }
  template <typename E>
  E* writable_value_rows(int32_t b, int32_t g) {
    return const_cast<E*>(value_rows<E>(b, g));
  }
  float* writable_key_scales(int32_t b, int32_t g) { return const_cast<float*>(key_scales(b, g)); }
  float* writable_value_scales(int32_t b, int32_t g) { return const_cast<float*>(value_scales(b, g)); }
  void set_loaded(int32_t b, int32_t length, int32_t stored, int32_t special_from) {
    lengths_[b] = length;
    stored_[b] = stored;
    special_from_[b] = special_from;
  }

  // Smallest slot of sequence b whose K or V holds an inf or NaN half (float16), or kNoSpecialValues.
  // Conservative after a truncate that keeps some of them, and in a ring.
  int32_t special_from(int32_t b) const { return special_from_[b]; }

  // Element d of the key / value in slot j of head g of batch item b, exactly as stored (tests, exact
  // kernel path).
  float key(int32_t b, int32_t g, int32_t j, int32_t d) const;
  float value(int32_t b, int32_t g, int32_t j, int32_t d) const;

  // Copies the tokens at positions [start, end) of every sequence out as k (B, end - start, Hkv*Dh), v (B,
  // end - start, Hkv*Dv) floats, keys as stored (rotated with rope): docs/spec.md 4.7. kCacheBadLength
  // unless first_readable() <= start <= end <= min_length().
  Status read(float* k, float* v, int32_t start, int32_t end) const;
  // The same tokens in the layout of read, as the cache's own elements: float16 bits for a float16 cache,
  // else read's float32 (bfloat16 and int8 read back as float32, docs/spec.md 4.8).
  Status read_stored(void* k, void* v, int32_t start, int32_t end) const;
  // The first position every sequence still holds: 0, or past what a ring dropped.
  int32_t first_readable() const;

 private:
  explicit KVCache(const KVCacheConfig& config);
  int64_t head_index(int32_t b, int32_t g) const { return int64_t{b} * config_.num_kv_heads + g; }
  template <typename C>                                                    // C: the dtype's codec
  typename C::Element* key_panel(int32_t b, int32_t g, int32_t position);  // the panel holding `position`'s key
  template <typename C>
  typename C::Element* value_row(int32_t b, int32_t g, int32_t position);
  // The stores of append through the dtype's codec (cache_codecs.hpp): the tokens of every sequence, one
  // token's key or value of head g (Dh floats), 8 tokens' keys (Codec::kPanelRows8, SIMD builds); true when
  // an inf/NaN half was stored. One loop for every dtype, the dtype dispatched per store.
  void store_tokens(TensorView<const float> k, TensorView<const float> v, int32_t n, const RotaryTables* rope,
                    const int32_t* new_tokens);
  bool store_key(const float* k, int32_t b, int32_t g, int32_t position);
  bool store_keys8(const float* k, int64_t row_stride, int32_t b, int32_t g, int32_t position);
  bool store_value(const float* v, int32_t b, int32_t g, int32_t position);
  float* key_scale_row(int32_t b, int32_t g, int32_t position);    // scaled: key `position`'s NBk scales, stride P
  float* value_scale_row(int32_t b, int32_t g, int32_t position);  // scaled: value `position`'s NBv scales
  void set_length(int32_t b, int32_t length);
  bool can_truncate(int32_t b, int32_t length) const;
  CacheSequenceSpan sequence_span(int32_t b) const;  // kv_cache_reorder.cpp
  // The key of head g of one token as stored: k_row + g*Dh itself, or rotated at `position` into rotated_.
  const float* key_to_store(const float* k_row, int32_t g, const RotaryTables* rope, int32_t position);

  KVCacheConfig config_;
  // One block for the small state: lengths (B), special_from (B), stored (B), then one rotated key (Dh floats). One
  // allocation instead of three keeps a cache's create/free from fragmenting the wasm heap's small blocks.
  void* state_ = nullptr;
  int32_t* lengths_ = nullptr;       // (B)
  int32_t* special_from_ = nullptr;  // (B)
  int32_t* stored_ = nullptr;        // (B)
  int64_t panels_ = 0;               // ceil(capacity / P)
  void* keys_ = nullptr;
  void* values_ = nullptr;
  float* key_scales_ = nullptr;    // scaled dtypes only
  float* value_scales_ = nullptr;  // scaled dtypes only
  float* rotated_ = nullptr;       // one rotated key (Dh), in state_
};

// The caches of one instance, by id. Ids are never reused, so a freed cache's id stays invalid; the
// first id comes from the caller (a random base from JS makes another instance's ids unknown here).
class KVCacheRegistry {
 public:
  explicit KVCacheRegistry(uint32_t first_id = 1) : next_id_(first_id == 0 ? 1 : first_id) {}

  // Creates a cache and returns its id in *id (0 on failure).
  Status create(const KVCacheConfig& config, uint32_t* id);
  // Takes a cache made elsewhere (a load: kv_cache_io.hpp) and returns its new id in *id (kNullPointer and 0
  // for a null cache).
  Status adopt(std::unique_ptr<KVCache> cache, uint32_t* id);
  KVCache* find(uint32_t id) const;  // nullptr: no such cache
  Status free(uint32_t id);          // kCacheInvalid when there is no such cache
  void free_all();
  size_t size() const { return caches_.size(); }
  // Ids issued from now on start at `id` (skipping 0).
  void set_next_id(uint32_t id) { next_id_ = id == 0 ? 1 : id; }

 private:
  std::vector<std::pair<uint32_t, std::unique_ptr<KVCache>>> caches_;
  uint32_t next_id_;
};

}  // namespace mha
