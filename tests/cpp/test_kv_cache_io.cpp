// Saved KV caches (src/mha/cache/kv_cache_io.hpp, docs/cache-format.md): the CRC-32, round trips that keep every
// stored bit and every later attend's bits (float32 and float16, ragged lengths, Dv != Dh, empty caches,
// the capacity option), and the refusal of anything save did not write: every single-byte change and every
// truncation of a small save, each header field, with nothing leaked.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "heap_usage.hpp"
#include "mha/decode/decode.hpp"
#include "mha/core/f16.hpp"
#include "mha/cache/kv_cache.hpp"
#include "mha/cache/kv_cache_io.hpp"
#include "test_util.hpp"

namespace {

using mha::CacheDType;
using mha::KVCache;
using mha::KVCacheConfig;
using mha::KVCacheStorage;
using mha::Status;
using Bytes = std::vector<uint8_t>;

Bytes save(const KVCache& cache) {
  Bytes bytes(size_t(KVCacheStorage::saved_bytes(cache)), 0xcd);
  REQUIRE(KVCacheStorage::save(cache, bytes.data(), int64_t(bytes.size())) == Status::kOk);
  return bytes;
}

std::unique_ptr<KVCache> load(const Bytes& bytes, int32_t capacity = 0) {
  std::unique_ptr<KVCache> cache;
  mha::LoadMessage why;
  const Status status = KVCacheStorage::load(bytes.data(), int64_t(bytes.size()), capacity, cache, &why);
  INFO(why.text);
  REQUIRE(status == Status::kOk);
  REQUIRE(why.empty());
  REQUIRE(cache);
  return cache;
}

// The status and message of a load that must fail; the cache stays null.
Status refused(const Bytes& bytes, std::string& why, int32_t capacity = 0) {
  std::unique_ptr<KVCache> cache;
  mha::LoadMessage message;
  const Status status = KVCacheStorage::load(bytes.data(), int64_t(bytes.size()), capacity, cache, &message);
  REQUIRE(!cache);
  why = message.text;
  REQUIRE(int(why.size()) == message.length);
  return status;
}

void put_u32(Bytes& bytes, size_t at, uint32_t x) { std::memcpy(bytes.data() + at, &x, 4); }
// Recomputes the checksum after a test changed a field, so the field's own check is what refuses it.
void resign(Bytes& bytes) { put_u32(bytes, bytes.size() - 4, mha::crc32(bytes.data(), int64_t(bytes.size()) - 4)); }
// A copy of `bytes` with the u32 (word) or the byte at `at` set to `value`, its checksum recomputed.
Bytes changed_at(const Bytes& bytes, size_t at, uint32_t value, bool word) {
  Bytes b = bytes;
  if (word)
    put_u32(b, at, value);
  else
    b[at] = uint8_t(value);
  resign(b);
  return b;
}

std::unique_ptr<KVCache> make_cache(const KVCacheConfig& config) {
  std::unique_ptr<KVCache> cache;
  REQUIRE(KVCache::create(config, cache) == Status::kOk);
  return cache;
}

// n new tokens for every sequence (B, n, Hkv*Dh) and (B, n, Hkv*Dv), seeded; `specials` puts an inf and a
// NaN into k and a value that overflows binary16 into v.
void append(KVCache& cache, int32_t n, uint64_t seed, const int32_t* counts = nullptr, bool specials = false) {
  const KVCacheConfig& c = cache.config();
  const int32_t kw = c.num_kv_heads * c.head_dim, vw = c.num_kv_heads * c.value_dim();
  auto k = mha_test::random_tensor(size_t(c.batch) * n * kw, seed, 3.0f);
  auto v = mha_test::random_tensor(size_t(c.batch) * n * vw, seed + 1, 3.0f);
  if (specials) {
    k[size_t(kw) * (n - 1)] = std::numeric_limits<float>::infinity();
    k[k.size() - 1] = std::numeric_limits<float>::quiet_NaN();
    v[v.size() / 2] = 1e6f;
  }
  // An int8 or int4 cache refuses inf and NaN (docs/spec.md 4.8) and stores nothing.
  const Status want = specials && mha::cache_dtype_info(c.dtype).finite_only ? Status::kCacheNonFinite : Status::kOk;
  REQUIRE(cache.append({k.data(), int64_t{n} * kw, kw}, {v.data(), int64_t{n} * vw, vw}, n, nullptr, counts) == want);
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Same config (capacity aside), lengths and every stored element, bit for bit.
void require_same_tokens(const KVCache& a, const KVCache& b) {
  const KVCacheConfig &x = a.config(), &y = b.config();
  REQUIRE(x.batch == y.batch);
  REQUIRE(x.num_kv_heads == y.num_kv_heads);
  REQUIRE(x.head_dim == y.head_dim);
  REQUIRE(x.value_dim() == y.value_dim());
  REQUIRE(x.dtype == y.dtype);
  for (int32_t s = 0; s < x.batch; ++s) {
    REQUIRE(a.length(s) == b.length(s));
    for (int32_t g = 0; g < x.num_kv_heads; ++g)
      for (int32_t j = 0; j < a.length(s); ++j) {
        for (int32_t d = 0; d < x.head_dim; ++d) REQUIRE(same_bits(a.key(s, g, j, d), b.key(s, g, j, d)));
        for (int32_t d = 0; d < x.value_dim(); ++d) REQUIRE(same_bits(a.value(s, g, j, d), b.value(s, g, j, d)));
      }
  }
}

// One attend of n tokens (H = 2 Hkv query heads, causal) with seeded inputs; its output.
std::vector<float> attend(KVCache& cache, int32_t n, uint64_t seed, const int32_t* counts = nullptr) {
  const KVCacheConfig& c = cache.config();
  const int32_t H = 2 * c.num_kv_heads, qw = H * c.head_dim, kw = c.num_kv_heads * c.head_dim,
                vw = c.num_kv_heads * c.value_dim();
  const int32_t ow = H * c.value_dim();
  const auto q = mha_test::random_tensor(size_t(c.batch) * n * qw, seed);
  const auto k = mha_test::random_tensor(size_t(c.batch) * n * kw, seed + 1);
  const auto v = mha_test::random_tensor(size_t(c.batch) * n * vw, seed + 2);
  std::vector<float> out(size_t(c.batch) * n * ow, -1.0f);
  mha::CacheAttendArgs args;
  args.new_tokens = n;
  args.new_token_counts = counts;
  args.q = {q.data(), int64_t{n} * qw, qw};
  args.k = {k.data(), int64_t{n} * kw, kw};
  args.v = {v.data(), int64_t{n} * vw, vw};
  args.out = {out.data(), int64_t{n} * ow, ow};
  args.num_heads = H;
  mha::DecodeScratch scratch;
  mha::Workspace tiled;
  REQUIRE(mha::cache_attend(cache, args, scratch, nullptr, tiled) == Status::kOk);
  return out;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Saves, loads, and checks that the copy holds the same tokens, saves to the same bytes and keeps
// attending with the same bits (a 1-token step, then a ragged 3-token one).
void require_round_trip(KVCache& cache) {
  const Bytes bytes = save(cache);
  auto copy = load(bytes);
  REQUIRE(copy->config().capacity == cache.config().capacity);
  require_same_tokens(cache, *copy);
  REQUIRE(save(*copy) == bytes);
  for (int32_t b = 0; b < cache.config().batch; ++b) {
    if (cache.config().dtype == CacheDType::kFloat16) REQUIRE(copy->special_from(b) >= cache.special_from(b));
  }
  if (cache.max_length() + 4 > cache.config().capacity) return;
  REQUIRE(bits_equal(attend(cache, 1, 77), attend(*copy, 1, 77)));
  std::vector<int32_t> counts(size_t(cache.config().batch), 3);
  counts[0] = 1;
  REQUIRE(bits_equal(attend(cache, 3, 78, counts.data()), attend(*copy, 3, 78, counts.data())));
  require_same_tokens(cache, *copy);
}

}  // namespace

TEST_CASE("kv cache io: CRC-32 is IEEE 802.3's (zlib's), in any split and any size", "[kv_cache_io]") {
  const char* check = "123456789";
  REQUIRE(mha::crc32(reinterpret_cast<const uint8_t*>(check), 9) == 0xCBF43926u);
  REQUIRE(mha::crc32(nullptr, 0) == 0u);
  Bytes data(5000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 131 + (i >> 3));
  // The bitwise definition, prefix by prefix: every size below and above the four-stream threshold (1 KiB).
  uint32_t crc = 0xffffffffu;
  for (size_t size = 0; size <= data.size(); ++size) {
    INFO("size " << size);
    REQUIRE(mha::crc32(data.data(), int64_t(size)) == ~crc);
    if (size == data.size()) break;
    crc ^= data[size];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
  }
  const uint32_t whole = mha::crc32(data.data(), int64_t(data.size()));
  for (int64_t split : {1, 7, 8, 9, 500, 1023, 1024, 2100, 4999}) {
    REQUIRE(mha::crc32(data.data() + split, int64_t(data.size()) - split, mha::crc32(data.data(), split)) == whole);
  }
}

TEST_CASE("kv cache io: round trips keep every bit and every later attend's bits", "[kv_cache_io]") {
  const CacheDType dtype =
      GENERATE(CacheDType::kFloat32, CacheDType::kFloat16, CacheDType::kBFloat16, CacheDType::kInt8, CacheDType::kInt4);
  const int32_t value_dim =
      GENERATE(0, 5, 20, 40);  // 40: two int8 blocks  // Dv = Dh, smaller (not a multiple of 8), larger
  INFO("dtype " << int(dtype) << " value_dim " << value_dim);
  SECTION("uniform lengths across a panel boundary") {
    auto cache = make_cache(KVCacheConfig{2, 2, 12, 80, dtype, value_dim});
    append(*cache, 20, 1);
    append(*cache, 17, 2);  // 37 tokens: two panels
    require_round_trip(*cache);
  }
  SECTION("ragged lengths: truncate_each and new_tokens, one sequence empty") {
    auto cache = make_cache(KVCacheConfig{3, 1, 7, 70, dtype, value_dim});
    append(*cache, 40, 3);
    const int32_t keep[] = {33, 0, 40};
    REQUIRE(cache->truncate_each(keep) == Status::kOk);
    const int32_t counts[] = {2, 5, 0};
    append(*cache, 5, 4, counts);
    REQUIRE(cache->length(0) == 35);
    REQUIRE(cache->length(1) == 5);
    REQUIRE(cache->length(2) == 40);
    require_round_trip(*cache);
  }
  SECTION("inf and NaN halves: special_from is found again") {
    auto cache = make_cache(KVCacheConfig{2, 2, 8, 64, dtype, value_dim});
    append(*cache, 9, 5);
    append(*cache, 4, 6, nullptr, /*specials=*/true);
    require_round_trip(*cache);
    if (dtype == CacheDType::kFloat16) {
      auto copy = load(save(*cache));
      REQUIRE(copy->special_from(0) == 12);  // the inf of k, token 3 of the second append
      REQUIRE(copy->special_from(1) <= 12);
    }
  }
  SECTION("empty cache") {
    auto cache = make_cache(KVCacheConfig{4, 3, 5, 9, dtype, value_dim});
    const Bytes bytes = save(*cache);
    REQUIRE(bytes.size() == 48 + 4 * 4 + 4);
    require_round_trip(*cache);
  }
}

TEST_CASE("kv cache io: the capacity option", "[kv_cache_io]") {
  auto cache = make_cache(KVCacheConfig{2, 1, 8, 40, CacheDType::kFloat16});
  append(*cache, 30, 9);
  const int32_t keep[] = {30, 12};
  REQUIRE(cache->truncate_each(keep) == Status::kOk);
  const Bytes bytes = save(*cache);
  SECTION("larger: the same tokens, room for more, and back to the same bytes") {
    auto big = load(bytes, 1000);
    REQUIRE(big->config().capacity == 1000);
    require_same_tokens(*cache, *big);
    append(*big, 900, 10);
    REQUIRE(big->length(0) == 930);
    big = load(bytes, 1000);
    REQUIRE(load(save(*big), 40) != nullptr);
    REQUIRE(save(*load(save(*big), 40)) == bytes);
  }
  SECTION("the longest sequence's length exactly, and below it an error") {
    REQUIRE(load(bytes, 30)->config().capacity == 30);
    std::string why;
    REQUIRE(refused(bytes, why, 29) == Status::kCacheBadLength);
    REQUIRE(why == "expected at least the longest saved sequence, lengths[0] = 30, got 29");
    REQUIRE(refused(bytes, why, -1) == Status::kNonPositiveDim);
  }
  SECTION("too large for the heap") {
    std::string why;
    REQUIRE(refused(bytes, why, 2000000000) == Status::kCacheTooLarge);
    REQUIRE(why.find("more than it can provide (4 GiB at most)") != std::string::npos);
  }
}

TEST_CASE("kv cache io: every changed byte, every truncation and extra bytes are refused, nothing leaks",
          "[kv_cache_io]") {
  auto cache = make_cache(KVCacheConfig{2, 1, 3, 8, CacheDType::kFloat16, 2});
  append(*cache, 3, 11);
  const int32_t keep[] = {3, 1};
  REQUIRE(cache->truncate_each(keep) == Status::kOk);
  const Bytes bytes = save(*cache);
  REQUIRE(bytes.size() == 48 + 8 + 4 * 5 * 2 + 4);
  cache.reset();
  const size_t heap_before = mha_test::heap_bytes_in_use();
  int64_t cases = 0;
  {
    std::string why;
    for (size_t at = 0; at < bytes.size(); ++at) {
      for (uint8_t flip : {0x01, 0x80, 0xff, 0x5a}) {
        Bytes changed = bytes;
        changed[at] ^= flip;
        INFO("byte " << at << " ^ " << int(flip));
        REQUIRE(refused(changed, why) == Status::kCacheBadSave);
        REQUIRE(!why.empty());
        ++cases;
      }
    }
    for (size_t size = 0; size < bytes.size(); ++size) {
      INFO("truncated to " << size);
      REQUIRE(refused(Bytes(bytes.begin(), bytes.begin() + long(size)), why) == Status::kCacheBadSave);
      REQUIRE(!why.empty());
      ++cases;
    }
    Bytes longer = bytes;
    longer.push_back(0);
    REQUIRE(refused(longer, why) == Status::kCacheBadSave);
    REQUIRE(why == "101 bytes, a cache of these dims and lengths is 100 (extra bytes after it?)");
    REQUIRE(refused(Bytes(bytes.begin(), bytes.end() - 1), why) == Status::kCacheBadSave);
    REQUIRE(why == "99 bytes, a cache of these dims and lengths is 100 (truncated?)");
  }
  REQUIRE(cases == int64_t(bytes.size()) * 5);
  REQUIRE(mha_test::heap_back_to(heap_before, mha_test::heap_bytes_in_use()));
}

TEST_CASE("kv cache io: each header field's own message", "[kv_cache_io]") {
  auto cache = make_cache(KVCacheConfig{1, 2, 4, 16, CacheDType::kFloat32});
  append(*cache, 2, 12);
  const Bytes bytes = save(*cache);
  std::string why;
  auto with = [&](size_t at, uint32_t value) {
    Bytes changed = bytes;
    put_u32(changed, at, value);
    resign(changed);
    return changed;
  };
  Bytes text = bytes;
  text.erase(text.begin() + 5);  // CR LF -> LF
  REQUIRE(refused(text, why) == Status::kCacheBadSave);
  REQUIRE(why.find("bytes 0..7 are not the mha-wasm KV cache magic") == 0);
  REQUIRE(why.find("line endings") != std::string::npos);
  REQUIRE(refused(Bytes{'P', 'K', 3, 4, 0, 0, 0, 0, 0}, why) == Status::kCacheBadSave);
  REQUIRE(why.find("bytes 0..7 are not") == 0);
  REQUIRE(refused(Bytes(bytes.begin(), bytes.begin() + 5), why) == Status::kCacheBadSave);
  REQUIRE(why == "5 bytes, shorter than the smallest saved KV cache (56 bytes)");
  REQUIRE(refused(with(8, 7), why) == Status::kCacheBadSave);
  REQUIRE(why == "version 7, this build reads versions 1 to 4 (docs/cache-format.md)");
  REQUIRE(refused(with(8, 0), why) == Status::kCacheBadSave);
  REQUIRE(refused(with(16, 2), why) == Status::kCacheBadSave);
  REQUIRE(
      why ==
      "dtype 2 (bfloat16) in a version 1 save; save() writes float32 and float16 as version 1, bfloat16 and int8 as "
      "version 2, int4 as version 4 (and ring caches of the version 1 and 2 dtypes as version 3)");
  REQUIRE(refused(with(16, 4), why) == Status::kCacheBadSave);
  REQUIRE(why.find("dtype 4 (int4) in a version 1 save") == 0);
  REQUIRE(refused(with(8, 4), why) == Status::kCacheBadSave);
  REQUIRE(why.find("dtype 0 (float32) in a version 4 save") == 0);
  REQUIRE(refused(with(16, 3), why) == Status::kCacheBadSave);
  REQUIRE(why.find("dtype 3 (int8) in a version 1 save") == 0);
  REQUIRE(refused(with(8, 2), why) == Status::kCacheBadSave);
  REQUIRE(why.find("dtype 0 (float32) in a version 2 save") == 0);
  REQUIRE(refused(with(16, 9), why) == Status::kCacheBadSave);
  REQUIRE(why == "dtype 9 is not a KV cache dtype (0 float32, 1 float16, 2 bfloat16, 3 int8, 4 int4)");
  REQUIRE(refused(with(24, 0), why) == Status::kCacheBadSave);
  REQUIRE(why == "numKvHeads is 0 (bytes 24..27), expected a positive integer");
  REQUIRE(refused(with(36, 0x80000000u), why) == Status::kCacheBadSave);
  REQUIRE(why == "capacity is -2147483648 (bytes 36..39), expected a positive integer");
  REQUIRE(refused(with(40, 1), why) == Status::kCacheBadSave);
  REQUIRE(why.find("bytes 40..47 (flags, reserved) are 0x00000001, 0x00000000, expected 0") == 0);
  REQUIRE(refused(with(12, 56), why) == Status::kCacheBadSave);
  REQUIRE(why == "the header says it is 56 bytes long, the header of a batch of 1 is 52");
  REQUIRE(refused(with(48, 17), why) == Status::kCacheBadSave);
  REQUIRE(why == "lengths[0] is 17, outside [0, capacity = 16]");
  REQUIRE(refused(with(20, 1000), why) == Status::kCacheBadSave);
  REQUIRE(why == "the header says it is 52 bytes long, the header of a batch of 1000 is 4048");
  Bytes batch = with(20, 1000);  // and a header size to match: the lengths would run past the end
  put_u32(batch, 12, 4048);
  REQUIRE(refused(batch, why) == Status::kCacheBadSave);
  REQUIRE(why == "184 bytes, shorter than the header and checksum of a batch of 1000 (4052 bytes)");
  Bytes changed = bytes;
  changed[60] ^= 1;
  REQUIRE(refused(changed, why) == Status::kCacheBadSave);
  REQUIRE(why.find("checksum mismatch: the CRC-32 of bytes 0..") == 0);
  // A valid save of a cache that no heap holds: its own status, not kCacheBadSave.
  Bytes huge = with(36, 1u << 30);
  REQUIRE(refused(huge, why) == Status::kCacheTooLarge);
  REQUIRE(why.find("a float32 cache of batch 1, numKvHeads 2, headDim 4, vHeadDim 4 and capacity 1073741824 needs") ==
          0);
  // A size overflow: 2^31 - 1 tokens of Hkv (2^31 - 1) * (Dh + Dv) (2^32 - 2) elements.
  Bytes wide = bytes;
  for (size_t at : {24, 28, 32, 36, 48}) put_u32(wide, at, 0x7fffffffu);
  resign(wide);
  REQUIRE(refused(wide, why) == Status::kCacheBadSave);
  REQUIRE(why ==
          std::to_string(bytes.size()) + " bytes, a cache of these dims and lengths is more than 2^53 (truncated?)");
}

TEST_CASE("kv cache io: int8 saves hold only what a quantization stores", "[kv_cache_io]") {
  // Dh 40 (blocks of 32 and 8), Dv 8, 3 tokens: k (3, 40) int8, v (3, 8) int8, k scales (3, 2), v scales (3, 1).
  auto cache = make_cache(KVCacheConfig{1, 1, 40, 4, CacheDType::kInt8, 8});
  append(*cache, 3, 31);
  const Bytes bytes = save(*cache);
  REQUIRE(bytes.size() == 52 + 3 * (40 + 8 + 4 * 2 + 4 * 1) + 4);
  REQUIRE(bytes[8] == 2);  // version 2
  const size_t k_at = 52, v_at = k_at + 3 * 40, k_scales_at = v_at + 3 * 8, v_scales_at = k_scales_at + 3 * 2 * 4;
  std::string why;
  auto changed = [&](size_t at, uint32_t value, bool word) { return changed_at(bytes, at, value, word); };
  REQUIRE(refused(changed(k_scales_at + 4, 0xbf800000u, true), why) == Status::kCacheBadSave);  // -1
  REQUIRE(
      why.find("sequence 0, token 0, KV head 0: the k block 1 (scale 0xbf800000) is not what an int8 quantization") ==
      0);
  REQUIRE(refused(changed(v_scales_at + 8, 0x7fc00000u, true), why) == Status::kCacheBadSave);  // NaN
  REQUIRE(why.find("sequence 0, token 2, KV head 0: the v block 0") == 0);
  REQUIRE(refused(changed(v_at + 3, 0x80, false), why) == Status::kCacheBadSave);  // -128
  REQUIRE(refused(changed(k_scales_at, 0, true), why) == Status::kCacheBadSave);   // scale 0, values not
  REQUIRE(load(changed(k_at, 0x81, false))->key(0, 0, 0, 0) < 0.0f);               // -127: a valid value
  // Every value of the loaded cache is q * scale of the save.
  auto copy = load(bytes);
  for (int32_t j = 0; j < 3; ++j)
    for (int32_t d = 0; d < 40; ++d) {
      float scale;
      std::memcpy(&scale, &bytes[k_scales_at + (j * 2 + d / 32) * 4], 4);
      REQUIRE(same_bits(copy->key(0, 0, j, d), float(int8_t(bytes[k_at + j * 40 + d])) * scale));
    }
}

TEST_CASE("kv cache io: int4 saves pack two values per byte and hold only what a quantization stores",
          "[kv_cache_io]") {
  // Dh 37 (blocks of 32 and 5: an odd row), Dv 8, a ring of 4 holding tokens 2..5 of 6, and a plain copy:
  // k (4, 19 bytes), v (4, 4 bytes), k scales (4, 2), v scales (4, 1), version 4 either way.
  for (const bool ring : {false, true}) {
    KVCacheConfig config{1, 1, 37, ring ? 4 : 8, CacheDType::kInt4, 8};
    config.ring = ring;
    auto cache = make_cache(config);
    append(*cache, 2, 41);
    append(*cache, 4, 43);
    if (!ring) REQUIRE(cache->truncate(4) == Status::kOk);
    const Bytes bytes = save(*cache);
    const size_t header = ring ? 56 : 52;
    REQUIRE(bytes.size() == header + 4 * (19 + 4 + 4 * 2 + 4 * 1) + 4);
    REQUIRE(bytes[8] == 4);
    REQUIRE(bytes[40] == (ring ? 1 : 0));
    const size_t k_at = header, v_at = k_at + 4 * 19, k_scales_at = v_at + 4 * 4, v_scales_at = k_scales_at + 4 * 2 * 4;
    std::string why;
    auto changed = [&](size_t at, uint32_t value, bool word) { return changed_at(bytes, at, value, word); };
    REQUIRE(refused(changed(k_scales_at + 4, 0xbf800000u, true), why) == Status::kCacheBadSave);  // -1
    REQUIRE(
        why.find("sequence 0, token 0, KV head 0: the k block 1 (scale 0xbf800000) is not what an int4 quantization") ==
        0);
    REQUIRE(refused(changed(v_scales_at + 8, 0x7f800000u, true), why) == Status::kCacheBadSave);  // inf
    REQUIRE(why.find("sequence 0, token 2, KV head 0: the v block 0") == 0);
    REQUIRE(refused(changed(v_at + 1, (bytes[v_at + 1] & 0x0f) | 0x80, false), why) == Status::kCacheBadSave);  // -8
    REQUIRE(refused(changed(k_at + 2, 0x08, false), why) == Status::kCacheBadSave);  // -8 in a low nibble
    REQUIRE(refused(changed(k_scales_at, 0, true), why) == Status::kCacheBadSave);   // scale 0, values not
    REQUIRE(refused(changed(k_at + 18, bytes[k_at + 18] | 0x10, false), why) == Status::kCacheBadSave);
    REQUIRE(why.find("an odd block's unused high nibble 0") != std::string::npos);
    // Every value of the loaded cache is q * scale of the save (q: nibble d % 2 of byte d / 2), at its position.
    auto copy = load(bytes);
    REQUIRE(copy->config().ring == ring);
    REQUIRE(copy->length(0) == (ring ? 6 : 4));
    const int32_t first = ring ? 2 : 0;
    for (int32_t t = 0; t < 4; ++t)
      for (int32_t d = 0; d < 37; ++d) {
        float scale;
        std::memcpy(&scale, &bytes[k_scales_at + size_t(t * 2 + d / 32) * 4], 4);
        const uint8_t byte = bytes[k_at + size_t(t) * 19 + size_t(d / 2)];
        const int q = int8_t(uint8_t(d % 2 == 0 ? byte << 4 : byte)) >> 4;
        REQUIRE(same_bits(copy->key(0, 0, copy->slot(first + t), d), float(q) * scale));
        REQUIRE(same_bits(copy->key(0, 0, copy->slot(first + t), d), cache->key(0, 0, cache->slot(first + t), d)));
      }
    REQUIRE(save(*copy) == bytes);
  }
}

TEST_CASE("kv cache io: the registry adopts a loaded cache under a new id", "[kv_cache_io]") {
  mha::KVCacheRegistry registry(50);
  uint32_t first = 0, second = 0;
  REQUIRE(registry.create(KVCacheConfig{1, 1, 4, 8}, &first) == Status::kOk);
  auto cache = load(save(*registry.find(first)));
  KVCache* raw = cache.get();
  REQUIRE(registry.adopt(std::move(cache), &second) == Status::kOk);
  REQUIRE(second != first);
  REQUIRE(registry.find(second) == raw);
  uint32_t none = 9;
  REQUIRE(registry.adopt(nullptr, &none) == Status::kNullPointer);
  REQUIRE(none == 0);
}
