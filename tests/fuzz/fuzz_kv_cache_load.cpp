// libFuzzer target of the saved-cache parser (src/mha/cache/kv_cache_io.hpp, docs/cache-format.md) under ASan +
// UBSan: the input is the bytes given to mha.loadKVCache, as they are. Built by the CMake option MHA_FUZZ
// (preset `fuzz`); scripts/fuzz.sh --slice runs a short fixed-seed slice from tests/fuzz/corpus-kv-cache
// (valid saves of small caches, written by tests/fuzz/make-kv-cache-corpus.mjs).
//
// What one input checks:
//   1. no crash, no ASan/UBSan report: no read outside the input (libFuzzer hands over a copy of exactly
//      `size` bytes), no overflow in the size arithmetic;
//   2. the load refuses with kCacheBadSave or kCacheTooLarge and a reason, and leaves no cache;
//   3. or it loads, and save() of the cache writes the input back byte for byte (so a load accepts exactly
//      what some save wrote), and a reload with the most stored tokens as capacity keeps the tokens.
// A valid save of a cache too large to allocate here cheaply (over 64 MiB of storage) is checked by
// KVCacheStorage::check only (libFuzzer's default RSS limit is 2 GiB).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "mha/cache/kv_cache.hpp"
#include "mha/cache/kv_cache_io.hpp"

namespace {

void fail(const char* what, const mha::LoadMessage& why) {
  std::fprintf(stderr, "fuzz_kv_cache_load: %s (%s)\n", what, why.text);
  std::abort();
}

constexpr double kMaxFuzzCacheBytes = 64.0 * 1024 * 1024;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mha::LoadMessage why;
  mha::SavedCacheHeader header;
  const mha::Status checked = mha::KVCacheStorage::check(data, int64_t(size), 0, header, &why);
  if (checked != mha::Status::kOk) {
    if (checked != mha::Status::kCacheBadSave && checked != mha::Status::kCacheTooLarge)
      fail("check: unexpected status", why);
    if (why.empty()) fail("check: a refusal without a reason", why);
  }
  if (checked == mha::Status::kOk && mha::kv_cache_bytes(header.config) > kMaxFuzzCacheBytes) return 0;

  std::unique_ptr<mha::KVCache> cache;
  const mha::Status status = mha::KVCacheStorage::load(data, int64_t(size), 0, cache, &why);
  if (status != checked) fail("load and check disagree", why);
  if (status != mha::Status::kOk) {
    if (cache) fail("a refused load left a cache", why);
    return 0;
  }
  if (!cache) fail("a load without a cache", why);
  const int64_t bytes = mha::KVCacheStorage::saved_bytes(*cache);
  if (bytes != int64_t(size)) fail("saved_bytes differs from the input size", why);
  std::vector<uint8_t> saved(size);
  if (mha::KVCacheStorage::save(*cache, saved.data(), bytes) != mha::Status::kOk) fail("save failed", why);
  if (std::memcmp(saved.data(), data, size) != 0) fail("save of the load differs from the input", why);

  // The smallest capacity that holds it (the most tokens a sequence stores): the same tokens.
  int32_t longest = 0;
  for (int32_t b = 0; b < cache->config().batch; ++b) longest = std::max(longest, cache->stored(b));
  if (longest > 0) {
    std::unique_ptr<mha::KVCache> tight;
    if (mha::KVCacheStorage::load(data, int64_t(size), longest, tight, &why) != mha::Status::kOk)
      fail("reload at max_length", why);
    for (int32_t b = 0; b < cache->config().batch; ++b) {
      if (tight->length(b) != cache->length(b) || tight->stored(b) != cache->stored(b))
        fail("reload: lengths differ", why);
      if (tight->special_from(b) != cache->special_from(b)) fail("reload: special_from differs", why);
    }
    for (int32_t g = 0; g < cache->config().num_kv_heads; ++g) {
      const int32_t j = cache->length(0) - 1;  // the newest position (stored whenever any is)
      if (j < 0 || cache->stored(0) == 0) break;
      const float a = cache->key(0, g, cache->slot(j), 0), b = tight->key(0, g, tight->slot(j), 0);
      if (std::memcmp(&a, &b, sizeof a) != 0) fail("reload: a key differs", why);
    }
    if (longest > 1 &&
        mha::KVCacheStorage::load(data, int64_t(size), longest - 1, tight, &why) != mha::Status::kCacheBadLength) {
      fail("a capacity below the most tokens a sequence stores was accepted", why);
    }
  }
  return 0;
}
