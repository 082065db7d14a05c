#include "mha/kv_cache.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace mha {
namespace {

constexpr size_t kAlignment = 64;

void* allocate_zeroed(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p != nullptr) std::memset(p, 0, rounded);
  return p;
}

// Byte counts of K (B, Hkv, panels, Dh, P) and V (B, Hkv, capacity, Dh8), as doubles: every factor is
// below 2^31, so the products are exact in a double up to 2^53 and only compared beyond that.
double key_bytes(const KVCacheConfig& c, double element) {
  const double panels = double((int64_t{c.capacity} + kKeysPerPanel - 1) / kKeysPerPanel);
  return double(c.batch) * c.num_kv_heads * panels * c.head_dim * kKeysPerPanel * element;
}
double value_bytes(const KVCacheConfig& c, double element) {
  const double dh8 = double((int64_t{c.head_dim} + 7) / 8 * 8);
  return double(c.batch) * c.num_kv_heads * c.capacity * dh8 * element;
}

bool valid_dtype(CacheDType dtype) { return dtype == CacheDType::kFloat32 || dtype == CacheDType::kFloat16; }

}  // namespace

double kv_cache_bytes(const KVCacheConfig& c) {
  if (c.batch <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 || c.capacity <= 0 || !valid_dtype(c.dtype)) return -1.0;
  const double element = c.dtype == CacheDType::kFloat16 ? 2.0 : 4.0;
  return key_bytes(c, element) + value_bytes(c, element);
}

Status validate_cache_config(const KVCacheConfig& c) {
  if (c.batch <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 || c.capacity <= 0) return Status::kNonPositiveDim;
  if (!valid_dtype(c.dtype)) return Status::kCacheBadOption;
  if (kv_cache_bytes(c) >= double(kMaxCacheBytes)) return Status::kCacheTooLarge;
  return Status::kOk;
}

KVCache::KVCache(const KVCacheConfig& config)
    : config_(config), panels_((int64_t{config.capacity} + kKeysPerPanel - 1) / kKeysPerPanel) {}

KVCache::~KVCache() {
  std::free(keys_);
  std::free(values_);
}

Status KVCache::create(const KVCacheConfig& config, std::unique_ptr<KVCache>& cache) {
  cache.reset();
  const Status status = validate_cache_config(config);
  if (status != Status::kOk) return status;
  std::unique_ptr<KVCache> fresh(new (std::nothrow) KVCache(config));
  if (!fresh) return Status::kOutOfMemory;
  const double element = config.dtype == CacheDType::kFloat16 ? 2.0 : 4.0;
  fresh->keys_ = allocate_zeroed(static_cast<size_t>(key_bytes(config, element)));
  fresh->values_ = allocate_zeroed(static_cast<size_t>(value_bytes(config, element)));
  if (fresh->keys_ == nullptr || fresh->values_ == nullptr) return Status::kOutOfMemory;  // fresh frees both
  cache = std::move(fresh);
  return Status::kOk;
}

// Key j of a head sits in panel j / P at column j % P.
void KVCache::append_token_f32(const float* k, const float* v, int32_t b, int32_t g, int32_t position) {
  const int32_t dh = config_.head_dim;
  float* panel_column = static_cast<float*>(keys_) + (head_index(b, g) * panels_ + position / kKeysPerPanel) * panel_elements() +
                        position % kKeysPerPanel;
  for (int32_t d = 0; d < dh; ++d) panel_column[d * kKeysPerPanel] = k[d];
  float* row = static_cast<float*>(values_) + (head_index(b, g) * config_.capacity + position) * value_row_elements();
  std::memcpy(row, v, sizeof(float) * dh);  // lanes [Dh, Dh8) stay zero from create
}

bool KVCache::append_token_f16(const float* k, const float* v, int32_t b, int32_t g, int32_t position) {
  const int32_t dh = config_.head_dim;
  const int32_t column = position % kKeysPerPanel;
  uint16_t* panel_column = static_cast<uint16_t*>(keys_) + (head_index(b, g) * panels_ + position / kKeysPerPanel) * panel_elements() + column;
  uint16_t specials = 0;  // OR of the exponent fields that are all ones
  for (int32_t d = 0; d < dh; ++d) {
    const uint16_t h = f16::encode(k[d]);
    panel_column[d * kKeysPerPanel] = h;
    specials |= f16::is_special(h) ? 1 : 0;
  }
  uint16_t* row = static_cast<uint16_t*>(values_) + (head_index(b, g) * config_.capacity + position) * value_row_elements();
  int32_t d = 0;
#if MHA_F16_SIMD
  for (; d + 8 <= dh; d += 8) {
    const auto lo = f16::simd::VecF::load_unaligned(v + d), hi = f16::simd::VecF::load_unaligned(v + d + 4);
    specials |= f16::simd::store8(lo, hi, row + d) ? 1 : 0;
  }
#endif
  for (; d < dh; ++d) {
    const uint16_t h = f16::encode(v[d]);
    row[d] = h;
    specials |= f16::is_special(h) ? 1 : 0;
  }
  return specials != 0;
}

Status KVCache::append(TensorView<const float> k, TensorView<const float> v, int32_t n) {
  if (n <= 0) return Status::kNonPositiveDim;
  if (k.data == nullptr || v.data == nullptr) return Status::kNullPointer;
  if (n > config_.capacity - length_) return Status::kCacheFull;
  const int32_t dh = config_.head_dim;
  int32_t first_special = kNoSpecialValues;
  for (int32_t b = 0; b < config_.batch; ++b) {
    for (int32_t t = 0; t < n; ++t) {
      const int32_t position = length_ + t;
      const float* k_row = k.data + b * k.batch_stride + t * k.row_stride;
      const float* v_row = v.data + b * v.batch_stride + t * v.row_stride;
      for (int32_t g = 0; g < config_.num_kv_heads; ++g) {
        if (config_.dtype == CacheDType::kFloat16) {
          if (append_token_f16(k_row + int64_t{g} * dh, v_row + int64_t{g} * dh, b, g, position))
            first_special = std::min(first_special, position);
        } else {
          append_token_f32(k_row + int64_t{g} * dh, v_row + int64_t{g} * dh, b, g, position);
        }
      }
    }
  }
  special_from_ = std::min(special_from_, first_special);
  length_ += n;
  return Status::kOk;
}

Status KVCache::truncate(int32_t length) {
  if (length < 0 || length > length_) return Status::kCacheBadLength;
  length_ = length;
  // Every inf/NaN half was at special_from or later: all are gone when that position is.
  if (special_from_ >= length) special_from_ = kNoSpecialValues;
  return Status::kOk;
}

float KVCache::key(int32_t b, int32_t g, int32_t j, int32_t d) const {
  const int64_t panel = head_index(b, g) * panels_ + j / kKeysPerPanel;
  const int32_t column = j % kKeysPerPanel;
  const int64_t at = panel * panel_elements() + int64_t{d} * kKeysPerPanel;
  if (config_.dtype == CacheDType::kFloat32) return static_cast<const float*>(keys_)[at + column];
  return f16::decode(static_cast<const uint16_t*>(keys_)[at + column]);
}

float KVCache::value(int32_t b, int32_t g, int32_t j, int32_t d) const {
  const int64_t row = (head_index(b, g) * config_.capacity + j) * value_row_elements();
  if (config_.dtype == CacheDType::kFloat32) return static_cast<const float*>(values_)[row + d];
  return f16::decode(static_cast<const uint16_t*>(values_)[row + d]);
}

void KVCache::read(float* k, float* v) const {
  const int32_t hkv = config_.num_kv_heads, dh = config_.head_dim;
  for (int32_t b = 0; b < config_.batch; ++b)
    for (int32_t j = 0; j < length_; ++j)
      for (int32_t g = 0; g < hkv; ++g)
        for (int32_t d = 0; d < dh; ++d) {
          const int64_t at = ((int64_t{b} * length_ + j) * hkv + g) * dh + d;
          k[at] = key(b, g, j, d);
          v[at] = value(b, g, j, d);
        }
}

Status KVCacheRegistry::create(const KVCacheConfig& config, uint32_t* id) {
  *id = 0;
  std::unique_ptr<KVCache> cache;
  const Status status = KVCache::create(config, cache);
  if (status != Status::kOk) return status;
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
