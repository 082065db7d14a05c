// The KV cache's storage (src/mha/cache/kv_cache.hpp): sizes and limits, append and read-back (f32 exact, f16
// rounded as f16::encode), appends past the capacity that change nothing, truncate, the inf/NaN
// tracking of f16 caches, and the registry's ids.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "heap_usage.hpp"
#include "mha/core/f16.hpp"
#include "mha/cache/kv_cache.hpp"
#include "test_util.hpp"

namespace {

using mha::CacheDType;
using mha::KVCache;
using mha::KVCacheConfig;
using mha::Status;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::unique_ptr<KVCache> make_cache(const KVCacheConfig& config) {
  std::unique_ptr<KVCache> cache;
  REQUIRE(KVCache::create(config, cache) == Status::kOk);
  REQUIRE(cache);
  return cache;
}

// New tokens k, v (B, n, Hkv*Dh) inside larger buffers: rows `pad` floats apart beyond their width and an
// `offset` of misalignment, the padding NaN so that any read outside the tensor shows.
struct Tokens {
  int32_t batch, n, width, pad, offset;
  std::vector<float> k_buf, v_buf;
  Tokens(const KVCacheConfig& c, int32_t new_tokens, uint32_t seed, int32_t row_pad = 3, int32_t misalign = 1)
      : batch(c.batch), n(new_tokens), width(c.num_kv_heads * c.head_dim), pad(row_pad), offset(misalign) {
    const size_t floats = static_cast<size_t>(offset + int64_t{batch} * n * (width + pad));
    k_buf.assign(floats, kNaN);
    v_buf.assign(floats, kNaN);
    const auto k = mha_test::random_tensor(size_t(batch) * n * width, seed);
    const auto v = mha_test::random_tensor(size_t(batch) * n * width, seed + 1);
    for (int32_t b = 0; b < batch; ++b)
      for (int32_t t = 0; t < n; ++t)
        for (int32_t c2 = 0; c2 < width; ++c2) {
          k_buf[at(b, t, c2)] = k[(size_t(b) * n + t) * width + c2];
          v_buf[at(b, t, c2)] = v[(size_t(b) * n + t) * width + c2];
        }
  }
  size_t at(int32_t b, int32_t t, int32_t c) const { return offset + (size_t(b) * n + t) * (width + pad) + c; }
  mha::TensorView<const float> k() const { return {k_buf.data() + offset, int64_t{n} * (width + pad), width + pad}; }
  mha::TensorView<const float> v() const { return {v_buf.data() + offset, int64_t{n} * (width + pad), width + pad}; }
};

float stored(float x, CacheDType dtype) {
  return dtype == CacheDType::kFloat16 ? mha::f16::decode(mha::f16::encode(x)) : x;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Every stored token of the cache equals the given tokens appended in order (rounded for f16).
void require_contents(const KVCache& cache, const std::vector<const Tokens*>& appended) {
  const KVCacheConfig& c = cache.config();
  int32_t position = 0;
  for (const Tokens* tokens : appended) {
    for (int32_t t = 0; t < tokens->n; ++t, ++position) {
      for (int32_t b = 0; b < c.batch; ++b)
        for (int32_t g = 0; g < c.num_kv_heads; ++g)
          for (int32_t d = 0; d < c.head_dim; ++d) {
            INFO("b " << b << " token " << position << " head " << g << " d " << d);
            const int32_t column = g * c.head_dim + d;
            REQUIRE(same_bits(cache.key(b, g, position, d), stored(tokens->k_buf[tokens->at(b, t, column)], c.dtype)));
            REQUIRE(
                same_bits(cache.value(b, g, position, d), stored(tokens->v_buf[tokens->at(b, t, column)], c.dtype)));
          }
    }
  }
  REQUIRE(position == cache.max_length());
}

std::vector<float> read_all(const KVCache& cache) {
  const KVCacheConfig& c = cache.config();
  const size_t count = size_t(c.batch) * cache.max_length() * c.num_kv_heads * c.head_dim;
  std::vector<float> both(2 * count);
  cache.read(both.data(), both.data() + count, 0, cache.min_length());
  return both;
}

}  // namespace

TEST_CASE("kv cache: byte counts, dims and the 2 GiB limit", "[kv_cache]") {
  // K (B, Hkv, ceil(cap / 32), Dh, 32) and V (B, Hkv, cap, Dh8).
  const KVCacheConfig small{2, 3, 5, 40, CacheDType::kFloat32};
  CHECK(mha::kv_cache_bytes(small) == double(2 * 3 * 64 * 5 * 4 + 2 * 3 * 40 * 8 * 4));
  KVCacheConfig half = small;
  half.dtype = CacheDType::kFloat16;
  CHECK(mha::kv_cache_bytes(half) == mha::kv_cache_bytes(small) / 2);

  for (KVCacheConfig bad :
       {KVCacheConfig{0, 1, 8, 8, CacheDType::kFloat32}, KVCacheConfig{1, 0, 8, 8, CacheDType::kFloat32},
        KVCacheConfig{1, 1, 0, 8, CacheDType::kFloat32}, KVCacheConfig{1, 1, 8, -1, CacheDType::kFloat32}}) {
    CHECK(mha::validate_cache_config(bad) == Status::kNonPositiveDim);
    CHECK(mha::kv_cache_bytes(bad) == -1.0);
  }
  CHECK(mha::validate_cache_config(KVCacheConfig{1, 1, 8, 8, static_cast<CacheDType>(7)}) == Status::kCacheBadDType);

  // (1, 32, 128) heads x 131072 tokens: 4 GiB in float32, too large for a wasm32 heap (the byte count is
  // what the error message quotes); 2 GiB in float16, which fits the check.
  KVCacheConfig big{1, 32, 128, 131072, CacheDType::kFloat32};
  CHECK(mha::kv_cache_bytes(big) == 4294967296.0);
  CHECK(mha::validate_cache_config(big) == Status::kCacheTooLarge);
  std::unique_ptr<KVCache> none;
  CHECK(KVCache::create(big, none) == Status::kCacheTooLarge);
  CHECK_FALSE(none);
  big.dtype = CacheDType::kFloat16;
  CHECK(mha::kv_cache_bytes(big) == 2147483648.0);
  CHECK(mha::validate_cache_config(big) == Status::kOk);
  big.dtype = CacheDType::kFloat32;
  big.capacity = 131072 - 1024;
  CHECK(mha::validate_cache_config(big) == Status::kOk);
  // Products of int32 dims far past 2^63 are still counted, not wrapped.
  const KVCacheConfig huge{INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, CacheDType::kFloat32};
  CHECK(mha::kv_cache_bytes(huge) > 1e37);
  CHECK(mha::validate_cache_config(huge) == Status::kCacheTooLarge);
}

TEST_CASE("kv cache: appends read back exactly (f32) or rounded to nearest even (f16), strided inputs", "[kv_cache]") {
  for (CacheDType dtype : {CacheDType::kFloat32, CacheDType::kFloat16}) {
    for (int32_t head_dim : {1, 3, 8, 13, 64}) {
      const KVCacheConfig config{2, 3, head_dim, 70, dtype};
      INFO("dtype " << int(dtype) << " Dh " << head_dim);
      auto cache = make_cache(config);
      REQUIRE(cache->max_length() == 0);
      // Steps that cross panel boundaries (32) and end exactly at the capacity.
      const Tokens a(config, 31, 10), b(config, 1, 20), c(config, 33, 30), d(config, 5, 40);
      std::vector<const Tokens*> appended;
      for (const Tokens* t : {&a, &b, &c, &d}) {
        REQUIRE(cache->append(t->k(), t->v(), t->n) == Status::kOk);
        appended.push_back(t);
        require_contents(*cache, appended);
      }
      REQUIRE(cache->max_length() == 70);
      REQUIRE(cache->special_from(0) == mha::kNoSpecialValues);
      // read() gives the same values as key()/value(), in (B, length, Hkv*Dh).
      const auto both = read_all(*cache);
      const size_t count = both.size() / 2;
      for (int32_t bi = 0; bi < 2; ++bi)
        for (int32_t j = 0; j < 70; j += 7)
          for (int32_t g = 0; g < 3; ++g) {
            const size_t at = ((size_t(bi) * 70 + j) * 3 + g) * head_dim;
            REQUIRE(same_bits(both[at], cache->key(bi, g, j, 0)));
            REQUIRE(same_bits(both[count + at], cache->value(bi, g, j, 0)));
          }
    }
  }
}

TEST_CASE("kv cache: an append past the capacity is kCacheFull and changes nothing", "[kv_cache]") {
  for (CacheDType dtype : {CacheDType::kFloat32, CacheDType::kFloat16}) {
    const KVCacheConfig config{2, 2, 8, 40, dtype};
    auto cache = make_cache(config);
    const Tokens first(config, 37, 50);
    REQUIRE(cache->append(first.k(), first.v(), first.n) == Status::kOk);
    const auto before = read_all(*cache);
    const Tokens too_many(config, 4, 60);  // 37 + 4 > 40
    REQUIRE(cache->append(too_many.k(), too_many.v(), too_many.n) == Status::kCacheFull);
    REQUIRE(cache->max_length() == 37);
    REQUIRE(read_all(*cache) == before);
    // The storage past the length was not written either: a fitting append then reads back cleanly.
    const Tokens fits(config, 3, 70);
    REQUIRE(cache->append(fits.k(), fits.v(), fits.n) == Status::kOk);
    require_contents(*cache, {&first, &fits});
    const Tokens one(config, 1, 80);
    REQUIRE(cache->append(one.k(), one.v(), 1) == Status::kCacheFull);
    REQUIRE(cache->max_length() == 40);
    REQUIRE(cache->append(one.k(), one.v(), 0) == Status::kNonPositiveDim);
    REQUIRE(cache->append(mha::TensorView<const float>{}, one.v(), 1) == Status::kNullPointer);
    require_contents(*cache, {&first, &fits});
  }
}

TEST_CASE("kv cache: truncate keeps a prefix in O(1); later appends overwrite the rest", "[kv_cache]") {
  const KVCacheConfig config{1, 2, 16, 64, CacheDType::kFloat32};
  auto cache = make_cache(config);
  const Tokens a(config, 10, 90), b(config, 20, 100), c(config, 7, 110);
  REQUIRE(cache->append(a.k(), a.v(), a.n) == Status::kOk);
  REQUIRE(cache->append(b.k(), b.v(), b.n) == Status::kOk);
  REQUIRE(cache->truncate(31) == Status::kCacheBadLength);
  REQUIRE(cache->truncate(-1) == Status::kCacheBadLength);
  REQUIRE(cache->max_length() == 30);
  REQUIRE(cache->truncate(10) == Status::kOk);
  REQUIRE(cache->max_length() == 10);
  REQUIRE(cache->append(c.k(), c.v(), c.n) == Status::kOk);
  require_contents(*cache, {&a, &c});
  REQUIRE(cache->truncate(0) == Status::kOk);
  REQUIRE(cache->max_length() == 0);
  REQUIRE(cache->append(b.k(), b.v(), b.n) == Status::kOk);
  require_contents(*cache, {&b});
}

TEST_CASE("kv cache: f16 caches track the first inf/NaN position through appends and truncates", "[kv_cache]") {
  const KVCacheConfig config{1, 2, 9, 64, CacheDType::kFloat16};
  auto cache = make_cache(config);
  Tokens a(config, 8, 120, 0, 0);
  REQUIRE(cache->append(a.k(), a.v(), a.n) == Status::kOk);
  REQUIRE(cache->special_from(0) == mha::kNoSpecialValues);
  Tokens b(config, 4, 130, 0, 0);
  b.v_buf[b.at(0, 2, 17)] = 70000.0f;  // overflows to inf: token 8 + 2, in V, the tail lane of Dh = 9
  b.k_buf[b.at(0, 3, 0)] = kNaN;       // token 11, in K
  REQUIRE(cache->append(b.k(), b.v(), b.n) == Status::kOk);
  REQUIRE(cache->special_from(0) == 10);
  REQUIRE(cache->value(0, 1, 10, 8) == kInf);
  REQUIRE(std::isnan(cache->key(0, 0, 11, 0)));
  REQUIRE(cache->truncate(11) == Status::kOk);  // token 10 stays
  REQUIRE(cache->special_from(0) == 10);
  REQUIRE(cache->truncate(10) == Status::kOk);
  REQUIRE(cache->special_from(0) == mha::kNoSpecialValues);
  Tokens c(config, 40, 140, 0, 0);
  c.k_buf[c.at(0, 39, 4)] = -kInf;  // token 49, in K
  c.v_buf[c.at(0, 20, 3)] = kNaN;   // token 30, in a V group that the SIMD encoder writes
  REQUIRE(cache->append(c.k(), c.v(), c.n) == Status::kOk);
  REQUIRE(cache->special_from(0) == 30);
  REQUIRE(cache->key(0, 0, 49, 4) == -kInf);
  REQUIRE(cache->truncate(10) == Status::kOk);
  c.k_buf[c.at(0, 15, 10)] = kInf;  // token 25: keys 24..31 are stored as one group of 8
  REQUIRE(cache->append(c.k(), c.v(), c.n) == Status::kOk);
  REQUIRE(cache->special_from(0) <= 25);
  REQUIRE(cache->special_from(0) >= 24);
  REQUIRE(cache->key(0, 1, 25, 1) == kInf);
  // A float32 cache never reports any: its kernel needs no conversion fix-up.
  auto f32 = make_cache(KVCacheConfig{1, 2, 9, 64, CacheDType::kFloat32});
  REQUIRE(f32->append(c.k(), c.v(), c.n) == Status::kOk);
  REQUIRE(f32->special_from(0) == mha::kNoSpecialValues);
  REQUIRE(std::isnan(f32->value(0, 0, 20, 3)));
}

TEST_CASE("kv cache registry: ids are never reused, freed or foreign ids are invalid, memory comes back",
          "[kv_cache]") {
  const size_t heap_before = mha_test::heap_bytes_in_use();
  {
    mha::KVCacheRegistry registry(1000);
    mha::KVCacheRegistry other(2000);
    const KVCacheConfig config{1, 2, 8, 16, CacheDType::kFloat16};
    uint32_t a = 0, b = 0, c = 0, foreign = 0;
    REQUIRE(registry.create(config, &a) == Status::kOk);
    REQUIRE(registry.create(config, &b) == Status::kOk);
    REQUIRE(other.create(config, &foreign) == Status::kOk);
    REQUIRE(a != b);
    REQUIRE(registry.find(a) != nullptr);
    REQUIRE(registry.find(a) != registry.find(b));
    REQUIRE(registry.find(0) == nullptr);
    REQUIRE(registry.find(foreign) == nullptr);
    REQUIRE(registry.free(foreign) == Status::kCacheInvalid);
    REQUIRE(registry.free(a) == Status::kOk);
    REQUIRE(registry.find(a) == nullptr);
    REQUIRE(registry.free(a) == Status::kCacheInvalid);
    REQUIRE(registry.create(config, &c) == Status::kOk);
    REQUIRE(c != a);
    REQUIRE(registry.find(b) != nullptr);
    uint32_t failed = 123;
    REQUIRE(registry.create(KVCacheConfig{1, 64, 128, 1 << 20, CacheDType::kFloat32}, &failed) ==
            Status::kCacheTooLarge);
    REQUIRE(failed == 0);
    REQUIRE(registry.size() == 2);
    registry.free_all();
    REQUIRE(registry.size() == 0);
    REQUIRE(registry.find(b) == nullptr);
    // Many create/free cycles leave nothing behind.
    const size_t heap_mid = mha_test::heap_bytes_in_use();
    for (int i = 0; i < 2000; ++i) {
      uint32_t id = 0;
      REQUIRE(registry.create(config, &id) == Status::kOk);
      REQUIRE(registry.free(id) == Status::kOk);
    }
    registry.free_all();
    REQUIRE(mha_test::heap_back_to(heap_mid, mha_test::heap_bytes_in_use()));
  }
  REQUIRE(mha_test::heap_back_to(heap_before, mha_test::heap_bytes_in_use()));
}

TEST_CASE("kv cache: round_to_f16 gives exactly the value a float16 cache stores, specials included", "[kv_cache]") {
  std::vector<float> x = mha_test::random_tensor(203, 77, 30000.0f);  // some overflow past 65504
  const float specials[] = {0.0f,   -0.0f,   65504.0f,       65520.0f,        -65519.0f,     1e-8f,
                            -3e-5f, 6.1e-5f, mha_test::kInf, -mha_test::kInf, mha_test::kNaN};
  x.insert(x.begin() + 5, std::begin(specials), std::end(specials));
  std::vector<float> y(x.size(), -1.0f);
  mha::round_to_f16(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("x[" << i << "] = " << x[i]);
    const float expected = mha::f16::decode(mha::f16::encode(x[i]));
    if (std::isnan(expected)) {
      REQUIRE(std::isnan(y[i]));
    } else {
      REQUIRE(std::memcmp(&expected, &y[i], sizeof(float)) == 0);
    }
  }
  mha::round_to_f16(x.data(), x.data(), static_cast<int64_t>(x.size()));  // in place
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isnan(y[i])) REQUIRE(std::memcmp(&x[i], &y[i], sizeof(float)) == 0);
}
