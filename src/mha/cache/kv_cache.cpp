#include "mha/cache/kv_cache.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "mha/core/cold.hpp"
#include "mha/core/f16_tensor.hpp"
#include "mha/core/rope.hpp"

#if MHA_F16_SIMD
#include "mha/simd/simd_transpose.hpp"
#endif

namespace mha {
namespace {

constexpr size_t kAlignment = 64;

void* allocate_zeroed(size_t bytes) {
  if (bytes > SIZE_MAX - kAlignment) return nullptr;  // a wasm32 size_t: the rounding below would wrap
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p != nullptr) std::memset(p, 0, rounded);
  return p;
}

// Byte counts of K (B, Hkv, panels, Dh, P) and V (B, Hkv, capacity, Dv8), as doubles: every factor is
// below 2^31, so the products are exact in a double up to 2^53 and only compared beyond that.
double key_bytes(const KVCacheConfig& c, double element) {
  const double panels = double((int64_t{c.capacity} + kKeysPerPanel - 1) / kKeysPerPanel);
  return double(c.batch) * c.num_kv_heads * panels * c.head_dim * kKeysPerPanel * element;
}
double value_bytes(const KVCacheConfig& c, double element) {
  const double dv8 = double((int64_t{c.value_dim()} + 7) / 8 * 8);
  return double(c.batch) * c.num_kv_heads * c.capacity * dv8 * element;
}
// Scaled dtypes: the key scales (B, Hkv, panels, NBk, P) and value scales (B, Hkv, capacity, NBv), float32.
double key_scale_bytes(const KVCacheConfig& c) {
  if (!cache_dtype_info(c.dtype).scaled) return 0.0;
  const double panels = double((int64_t{c.capacity} + kKeysPerPanel - 1) / kKeysPerPanel);
  return double(c.batch) * c.num_kv_heads * panels * scale_blocks(c.head_dim) * kKeysPerPanel * 4.0;
}
double value_scale_bytes(const KVCacheConfig& c) {
  if (!cache_dtype_info(c.dtype).scaled) return 0.0;
  return double(c.batch) * c.num_kv_heads * c.capacity * scale_blocks(c.value_dim()) * 4.0;
}

bool all_finite(const float* x, int32_t n) {
  for (int32_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

}  // namespace

double kv_cache_bytes(const KVCacheConfig& c) {
  if (c.batch <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 || c.capacity <= 0 || c.v_head_dim < 0 ||
      !cache_dtype_valid(c.dtype)) {
    return -1.0;
  }
  const double element = cache_dtype_info(c.dtype).element_bits / 8.0;
  return key_bytes(c, element) + value_bytes(c, element) + key_scale_bytes(c) + value_scale_bytes(c);
}

MHA_MINSIZE Status validate_cache_config(const KVCacheConfig& c) {
  if (c.batch <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 || c.capacity <= 0) return Status::kNonPositiveDim;
  if (c.v_head_dim < 0) return Status::kBadVHeadDim;
  if (!cache_dtype_valid(c.dtype)) return Status::kCacheBadDType;
  if (c.integer && !cache_dtype_info(c.dtype).integer) return Status::kCacheBadArithmetic;
  if (kv_cache_bytes(c) >= double(kMaxCacheBytes)) return Status::kCacheTooLarge;
  return Status::kOk;
}

void round_to_f16(const float* x, float* y, int64_t count) {
  // Through the float16 tensors' codec (f16_tensor.hpp), a chunk at a time: narrowed, then widened back
  // (the same encoder and decoder as the stored halves, so exactly the values append stores). y may be x.
  uint16_t halves[256];
  for (int64_t i = 0; i < count; i += 256) {
    const int64_t n = std::min<int64_t>(256, count - i);
    narrow_floats(x + i, halves, n);
    widen_halves(halves, y + i, n);
  }
}

void round_as_stored(CacheDType dtype, const float* x, float* y, int64_t rows, int32_t dim) {
  visit_codec(dtype, [&](auto codec) { decltype(codec)::round_as_stored(x, y, rows, dim); });
}

KVCache::KVCache(const KVCacheConfig& config)
    : config_(config), panels_((int64_t{config.capacity} + kKeysPerPanel - 1) / kKeysPerPanel) {}

KVCache::~KVCache() {
  std::free(keys_);
  std::free(values_);
  std::free(key_scales_);
  std::free(value_scales_);
  std::free(state_);
}

Status KVCache::create(const KVCacheConfig& config, std::unique_ptr<KVCache>& cache) {
  cache.reset();
  const Status status = validate_cache_config(config);
  if (status != Status::kOk) return status;
  std::unique_ptr<KVCache> fresh(new (std::nothrow) KVCache(config));
  if (!fresh) return Status::kOutOfMemory;
  const double element = cache_dtype_info(config.dtype).element_bits / 8.0;
  fresh->keys_ = allocate_zeroed(static_cast<size_t>(key_bytes(config, element)));
  fresh->values_ = allocate_zeroed(static_cast<size_t>(value_bytes(config, element)));
  if (cache_dtype_info(config.dtype).scaled) {
    fresh->key_scales_ = static_cast<float*>(allocate_zeroed(static_cast<size_t>(key_scale_bytes(config))));
    fresh->value_scales_ = static_cast<float*>(allocate_zeroed(static_cast<size_t>(value_scale_bytes(config))));
    if (fresh->key_scales_ == nullptr || fresh->value_scales_ == nullptr) return Status::kOutOfMemory;
  }
  // lengths (B, zero), special_from (B), stored (B, zero), rotated key (Dh), each part 4-byte aligned in a
  // 64-byte aligned block.
  const size_t batch = size_t(config.batch);
  fresh->state_ = allocate_zeroed(sizeof(int32_t) * 3 * batch + sizeof(float) * size_t(config.head_dim));
  if (fresh->keys_ == nullptr || fresh->values_ == nullptr || fresh->state_ == nullptr) {
    return Status::kOutOfMemory;  // fresh frees them
  }
  fresh->lengths_ = static_cast<int32_t*>(fresh->state_);
  fresh->special_from_ = fresh->lengths_ + batch;
  fresh->stored_ = fresh->special_from_ + batch;
  fresh->rotated_ = reinterpret_cast<float*>(fresh->stored_ + batch);
  std::fill_n(fresh->special_from_, batch, kNoSpecialValues);
  cache = std::move(fresh);
  return Status::kOk;
}

// Key j of a head sits in panel j / P at column j % P (key_panel_offset); a value row is Dv8 elements.
// Offsets count values, C::kElementBits each.
template <typename C>
typename C::Element* KVCache::key_panel(int32_t b, int32_t g, int32_t position) {
  const int64_t values = head_index(b, g) * panels_ * panel_elements() +
                         key_panel_offset(position / kKeysPerPanel * kKeysPerPanel, 0, config_.head_dim);
  return reinterpret_cast<typename C::Element*>(static_cast<char*>(keys_) + values * C::kElementBits / 8);
}
template <typename C>
typename C::Element* KVCache::value_row(int32_t b, int32_t g, int32_t position) {
  const int64_t values = (head_index(b, g) * config_.capacity + position) * value_row_elements();
  return reinterpret_cast<typename C::Element*>(static_cast<char*>(values_) + values * C::kElementBits / 8);
}

float* KVCache::key_scale_row(int32_t b, int32_t g, int32_t position) {
  return writable_key_scales(b, g) + key_scale_offset(position, 0, config_.head_dim);
}
float* KVCache::value_scale_row(int32_t b, int32_t g, int32_t position) {
  return writable_value_scales(b, g) + value_scale_offset(position, 0, config_.value_dim());
}

bool KVCache::store_key(const float* k, int32_t b, int32_t g, int32_t position) {
  return visit_codec(config_.dtype, [&](auto codec) {
    using C = decltype(codec);
    return C::encode_key(k, config_.head_dim, key_panel<C>(b, g, position), position % kKeysPerPanel,
                         C::kScaled ? key_scale_row(b, g, position) : nullptr);
  });
}

#if MHA_F16_SIMD
// Keys of 8 tokens (rows row_stride apart) at positions [position, position + 8), position % 8 == 0, so
// that they fill 8 adjacent, 16-byte aligned columns of one panel: 4x4 register transposes turn 4
// elements of 4 tokens into 4 panel-row pieces (the per-token store_key scatters one element per line).
// One body serves every kPanelRows8 codec, which comes in as two element writers: a copy of the
// transposes per codec costs 2.5 kB of wasm each, and the writer call per 8 elements does not show
// beside attention's O(n * T) work.
namespace {
struct PanelRowWriter {
  bool (*write8)(simd::VecF lo, simd::VecF hi, void* dst);  // 8 adjacent columns of a panel row
  void (*write1)(float x, void* dst, bool& specials);       // one column
  int64_t element_bytes;
};

template <typename Codec>
constexpr PanelRowWriter panel_row_writer() {
  using E = typename Codec::Element;
  return {[](simd::VecF lo, simd::VecF hi, void* dst) { return Codec::encode8(lo, hi, static_cast<E*>(dst)); },
          [](float x, void* dst, bool& specials) { *static_cast<E*>(dst) = Codec::encode_element(x, specials); },
          int64_t{sizeof(E)}};
}

bool store_keys8_with(const PanelRowWriter& writer, const float* k, int64_t row_stride, void* column, int32_t dh) {
  uint8_t* const out = static_cast<uint8_t*>(column);
  const int64_t row_bytes = kKeysPerPanel * writer.element_bytes;  // one panel row
  const int32_t dh4 = dh - dh % 4;
  bool specials = false;
  for (int32_t d = 0; d < dh4; d += 4) {
    using simd::VecF;
    VecF t[2][4];  // [token half][element d + j]: tokens 4h .. 4h + 3
    for (int h = 0; h < 2; ++h) {
      const float* r = k + 4 * h * row_stride + d;
      t[h][0] = VecF::load_unaligned(r), t[h][1] = VecF::load_unaligned(r + row_stride);
      t[h][2] = VecF::load_unaligned(r + 2 * row_stride), t[h][3] = VecF::load_unaligned(r + 3 * row_stride);
      simd::transpose_4x4(t[h][0], t[h][1], t[h][2], t[h][3]);
    }
    for (int j = 0; j < 4; ++j) specials |= writer.write8(t[0][j], t[1][j], out + (d + j) * row_bytes);
  }
  for (int32_t d = dh4; d < dh; ++d) {
    for (int32_t i = 0; i < 8; ++i)
      writer.write1(k[i * row_stride + d], out + d * row_bytes + i * writer.element_bytes, specials);
  }
  return specials;
}
}  // namespace

bool KVCache::store_keys8(const float* k, int64_t row_stride, int32_t b, int32_t g, int32_t position) {
  return visit_codec(config_.dtype, [&](auto codec) {
    using C = decltype(codec);
    if constexpr (C::kPanelRows8) {
      return store_keys8_with(panel_row_writer<C>(), k, row_stride,
                              key_panel<C>(b, g, position) + position % kKeysPerPanel, config_.head_dim);
    } else {
      return false;
    }
  });
}
#endif

bool KVCache::store_value(const float* v, int32_t b, int32_t g, int32_t position) {
  return visit_codec(config_.dtype, [&](auto codec) {
    using C = decltype(codec);
    // Dv elements; lanes [Dv, Dv8) stay zero
    return C::encode_value(v, config_.value_dim(), value_row<C>(b, g, position),
                           C::kScaled ? value_scale_row(b, g, position) : nullptr);
  });
}

const float* KVCache::key_to_store(const float* k_row, int32_t g, const RotaryTables* rope, int32_t position) {
  const float* key = k_row + int64_t{g} * config_.head_dim;
  if (rope == nullptr) return key;
  std::memcpy(rotated_, key, sizeof(float) * size_t(config_.head_dim));
  rotate_head(rotated_, 1, *rope, position);
  return rotated_;
}

int32_t KVCache::min_length() const { return *std::min_element(lengths_, lengths_ + config_.batch); }
int32_t KVCache::max_length() const { return *std::max_element(lengths_, lengths_ + config_.batch); }

Status KVCache::check_storable(TensorView<const float> k, TensorView<const float> v, int32_t n,
                               const RotaryTables* rope, const int32_t* new_tokens) {
  if (!cache_dtype_info(config_.dtype).finite_only) return Status::kOk;
  if (rope != nullptr && !rope->enabled()) rope = nullptr;
  const int32_t dh = config_.head_dim, dv = config_.value_dim();
  for (int32_t b = 0; b < config_.batch; ++b) {
    const int32_t count = new_tokens != nullptr ? new_tokens[b] : n;
    for (int32_t t = 0; t < count; ++t) {
      const float* k_row = k.data + b * k.batch_stride + t * k.row_stride;
      const float* v_row = v.data + b * v.batch_stride + t * v.row_stride;
      for (int32_t g = 0; g < config_.num_kv_heads; ++g) {
        // The rotation of finite keys can still overflow: the key is checked as it would be stored.
        if (!all_finite(key_to_store(k_row, g, rope, lengths_[b] + t), dh) || !all_finite(v_row + int64_t{g} * dv, dv))
          return Status::kCacheNonFinite;
      }
    }
  }
  return Status::kOk;
}

Status KVCache::append(TensorView<const float> k, TensorView<const float> v, int32_t n, const RotaryTables* rope,
                       const int32_t* new_tokens) {
  if (n <= 0) return Status::kNonPositiveDim;
  if (k.data == nullptr || v.data == nullptr) return Status::kNullPointer;
  if (rope != nullptr && !rope->enabled()) rope = nullptr;
  auto count_of = [&](int32_t b) { return new_tokens != nullptr ? new_tokens[b] : n; };
  for (int32_t b = 0; b < config_.batch; ++b) {
    // A ring overwrites its oldest tokens: only a call of more than `capacity` tokens cannot be held.
    if (count_of(b) > config_.capacity - (config_.ring ? 0 : lengths_[b])) return Status::kCacheFull;
    if (rope != nullptr && int64_t{lengths_[b]} + count_of(b) > rope->positions) return Status::kRopePosition;
  }
  const Status storable = check_storable(k, v, n, rope, new_tokens);
  if (storable != Status::kOk) return storable;
  store_tokens(k, v, n, rope, new_tokens);
  return Status::kOk;
}

// append's stores, once checked (rope null or enabled).
void KVCache::store_tokens(TensorView<const float> k, TensorView<const float> v, int32_t n, const RotaryTables* rope,
                           const int32_t* new_tokens) {
  const int32_t dv = config_.value_dim(), heads = config_.num_kv_heads;
  const bool panel_rows = cache_dtype_info(config_.dtype).panel_rows8;
  for (int32_t b = 0; b < config_.batch; ++b) {
    const int32_t length = lengths_[b], count = new_tokens != nullptr ? new_tokens[b] : n;
    // The first position of a group or token that stored an inf/NaN half: at or before the real one, so
    // special_from stays conservative.
    int32_t first_special = kNoSpecialValues;
    for (int32_t t = 0; t < count;) {
      const int32_t position = length + t, at = slot(position);  // rope rotates at the position
      const float* k_row = k.data + b * k.batch_stride + t * k.row_stride;
      // Rotated keys go one by one through rotated_ (the copy-in is O(n * Hkv * Dh) either way); 8 keys
      // fill 8 adjacent columns of one panel (a ring's may wrap before them).
      const bool eight = at % 8 == 0 && count - t >= 8 && at + 8 <= config_.capacity;
      const int32_t tokens = (panel_rows && rope == nullptr && eight) ? 8 : 1;
      bool specials = false;
      for (int32_t g = 0; g < heads; ++g) {
#if MHA_F16_SIMD
        if (tokens == 8) {
          specials |= store_keys8(k_row + int64_t{g} * config_.head_dim, k.row_stride, b, g, at);
          continue;
        }
#endif
        specials |= store_key(key_to_store(k_row, g, rope, position), b, g, at);
      }
      if (specials) first_special = std::min(first_special, at);
      t += tokens;
    }
    for (int32_t t = 0; t < count; ++t) {
      const float* v_row = v.data + b * v.batch_stride + t * v.row_stride;
      const int32_t at = slot(length + t);
      bool specials = false;
      for (int32_t g = 0; g < heads; ++g) specials |= store_value(v_row + int64_t{g} * dv, b, g, at);
      if (specials) first_special = std::min(first_special, at);
    }
    special_from_[b] = std::min(special_from_[b], first_special);
    lengths_[b] = length + count;
    stored_[b] = std::min(stored_[b] + count, config_.ring ? config_.capacity : INT32_MAX);
  }
}

void KVCache::set_length(int32_t b, int32_t length) {
  stored_[b] -= lengths_[b] - length;
  lengths_[b] = length;
  // Every inf/NaN half of sequence b was at special_from(b) or later: all are gone when that position is
  // (a ring's slots are not its positions: it keeps special_from).
  if (!config_.ring && special_from_[b] >= length) special_from_[b] = kNoSpecialValues;
}

// Whether sequence b may be cut to `length`: at most its length, and only tokens it still stores.
bool KVCache::can_truncate(int32_t b, int32_t length) const {
  return length >= 0 && length <= lengths_[b] && lengths_[b] - length <= stored_[b];
}

Status KVCache::truncate(int32_t length) {
  if (length < 0 || length > max_length()) return Status::kCacheBadLength;
  for (int32_t b = 0; b < config_.batch; ++b)
    if (!can_truncate(b, std::min(lengths_[b], length))) return Status::kCacheBadLength;
  for (int32_t b = 0; b < config_.batch; ++b) set_length(b, std::min(lengths_[b], length));
  return Status::kOk;
}

Status KVCache::truncate_each(const int32_t* lengths) {
  if (lengths == nullptr) return Status::kNullPointer;
  for (int32_t b = 0; b < config_.batch; ++b)
    if (!can_truncate(b, lengths[b])) return Status::kCacheBadLength;
  for (int32_t b = 0; b < config_.batch; ++b) set_length(b, lengths[b]);
  return Status::kOk;
}

float KVCache::key(int32_t b, int32_t g, int32_t j, int32_t d) const {
  const CacheHeadBlock head = head_block(b, g, 0);
  return read_key(config_.dtype, head.key_panels, head.key_scales, j, d, config_.head_dim);
}

float KVCache::value(int32_t b, int32_t g, int32_t j, int32_t d) const {
  const CacheHeadBlock head = head_block(b, g, 0);
  return read_value(config_.dtype, head.value_rows, head.value_scales, j, d, value_row_elements(), config_.value_dim());
}

CacheHeadBlock KVCache::head_block(int32_t b, int32_t g, int32_t key_end) const {
  CacheHeadBlock head;
  // The element type only sets the offsets' unit: the kernels cast by dtype.
  head.key_panels = key_panels<char>(b, g);
  head.value_rows = value_rows<char>(b, g);
  head.key_scales = key_scales(b, g);
  head.value_scales = value_scales(b, g);
  head.dtype = config_.dtype;
  head.integer = config_.integer;
  head.specials = cache_dtype_info(config_.dtype).tracks_specials && special_from_[b] < key_end;
  return head;
}

namespace {

// Tokens [start, end) of every sequence in read's layout, each element as E; `element(b, g, j, d, is_key)`
// gives it.
template <typename E, typename Element>
void read_tokens(const KVCacheConfig& c, E* k, E* v, int32_t start, int32_t end, Element element) {
  const int32_t hkv = c.num_kv_heads, dh = c.head_dim, dv = c.value_dim(), tokens = end - start;
  for (int32_t b = 0; b < c.batch; ++b)
    for (int32_t j = start; j < end; ++j)
      for (int32_t g = 0; g < hkv; ++g) {
        const int64_t token = (int64_t{b} * tokens + (j - start)) * hkv + g;
        for (int32_t d = 0; d < dh; ++d) k[token * dh + d] = element(b, g, j, d, true);
        for (int32_t d = 0; d < dv; ++d) v[token * dv + d] = element(b, g, j, d, false);
      }
}

}  // namespace

MHA_MINSIZE int32_t KVCache::first_readable() const {
  int32_t first = 0;
  for (int32_t b = 0; b < config_.batch; ++b) first = std::max(first, lengths_[b] - stored_[b]);
  return first;
}

MHA_MINSIZE Status KVCache::read(float* k, float* v, int32_t start, int32_t end) const {
  if (start < first_readable() || start > end || end > min_length()) return Status::kCacheBadLength;
  if (end > start && (k == nullptr || v == nullptr)) return Status::kNullPointer;
  read_tokens(config_, k, v, start, end, [this](int32_t b, int32_t g, int32_t j, int32_t d, bool is_key) {
    return is_key ? key(b, g, slot(j), d) : value(b, g, slot(j), d);
  });
  return Status::kOk;
}

MHA_MINSIZE Status KVCache::read_stored(void* k, void* v, int32_t start, int32_t end) const {
  if (!cache_dtype_info(config_.dtype).reads_stored)
    return read(static_cast<float*>(k), static_cast<float*>(v), start, end);
  if (start < first_readable() || start > end || end > min_length()) return Status::kCacheBadLength;
  if (end > start && (k == nullptr || v == nullptr)) return Status::kNullPointer;
  visit_codec(config_.dtype, [&](auto codec) {
    using E = typename decltype(codec)::Element;
    if constexpr (decltype(codec)::kReadsStored) {  // else read above
      read_tokens(config_, static_cast<E*>(k), static_cast<E*>(v), start, end,
                  [this](int32_t b, int32_t g, int32_t j, int32_t d, bool is_key) {
                    return is_key ? key_panels<E>(b, g)[key_panel_offset(slot(j), d, config_.head_dim)]
                                  : value_rows<E>(b, g)[int64_t{slot(j)} * value_row_elements() + d];
                  });
    }
  });
  return Status::kOk;
}

Status KVCacheRegistry::create(const KVCacheConfig& config, uint32_t* id) {
  *id = 0;
  std::unique_ptr<KVCache> cache;
  const Status status = KVCache::create(config, cache);
  if (status != Status::kOk) return status;
  return adopt(std::move(cache), id);
}

Status KVCacheRegistry::adopt(std::unique_ptr<KVCache> cache, uint32_t* id) {
  *id = 0;
  if (!cache) return Status::kNullPointer;
  while (next_id_ == 0 || find(next_id_) != nullptr) ++next_id_;  // 0 is "no cache"
  *id = next_id_++;
  caches_.emplace_back(*id, std::move(cache));
  return Status::kOk;
}

KVCache* KVCacheRegistry::find(uint32_t id) const {
  if (id == 0) return nullptr;
  for (const auto& entry : caches_)
    if (entry.first == id) return entry.second.get();
  return nullptr;
}

Status KVCacheRegistry::free(uint32_t id) {
  for (size_t i = 0; i < caches_.size(); ++i) {
    if (caches_[i].first != id || id == 0) continue;
    caches_[i] = std::move(caches_.back());
    caches_.pop_back();
    return Status::kOk;
  }
  return Status::kCacheInvalid;
}

void KVCacheRegistry::free_all() {
  caches_.clear();
  caches_.shrink_to_fit();
}

}  // namespace mha
