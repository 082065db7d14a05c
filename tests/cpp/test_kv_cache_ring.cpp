// Ring caches (docs/spec.md 5.5): a ring of capacity C fed a stream of 10 C tokens gives on every step what
// a plain cache holding every token gives with the same window (bit for bit until the ring first wraps,
// then within float32 rounding: its two runs of slots are merged by their log-sum-exp), out and lse, for
// every dtype, decode kernel and the exact rows, ragged steps, rope at the true positions, sinks, softcap,
// ALiBi and Dv != Dh; the same bits on 1 and 3 threads; read() of the stored positions equals the plain
// cache's; truncate and the window rule refuse what would reach overwritten tokens, changing nothing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mha/cache/kv_cache.hpp"
#include "mha/cache/kv_cache_io.hpp"
#include "mha/core/parallel.hpp"
#include "mha/decode/decode.hpp"
#include "strided_call.hpp"
#include "test_util.hpp"

using mha::CacheDType;
using mha::Status;

namespace {

constexpr int32_t kBatch = 3, kCapacity = 40, kWindow = 30, kPositions = 1024;

struct RingCase {
  CacheDType dtype = CacheDType::kFloat32;
  int32_t heads = 4, kv_heads = 2, dh = 16, dv = 0;
  float softcap = 0.0f;
  std::vector<float> sinks, alibi, cos, sin;
  int32_t rotary_dim = 0;

  int32_t value_dim() const { return dv > 0 ? dv : dh; }
  mha::AttentionOptions options() const {
    mha::AttentionOptions o;
    o.causal = true;
    o.window_left = kWindow;
    o.softcap = softcap;
    o.scale = mha::default_scale(dh);
    o.sinks = sinks.empty() ? nullptr : sinks.data();
    o.alibi_slopes = alibi.empty() ? nullptr : alibi.data();
    if (rotary_dim > 0) o.rope = mha::RotaryTables{cos.data(), sin.data(), kPositions, rotary_dim, false};
    return o;
  }
};

std::vector<RingCase> cases() {
  std::vector<RingCase> out;
  for (CacheDType dtype :
       {CacheDType::kFloat32, CacheDType::kFloat16, CacheDType::kBFloat16, CacheDType::kInt8, CacheDType::kInt4}) {
    RingCase plain;
    plain.dtype = dtype;
    out.push_back(plain);
    RingCase v3 = plain;  // rope, sinks and a value head of its own size
    v3.dv = 12;
    v3.sinks = {0.5f, -1.0f, 2.0f, 0.0f};
    v3.rotary_dim = 16;
    mha_test::rope_tables(16, kPositions, 10000.0, v3.cos, v3.sin);
    out.push_back(v3);
    RingCase v2 = plain;  // softcap and ALiBi
    v2.softcap = 5.0f;
    v2.alibi = {0.25f, 0.5f, 0.125f, 1.0f};
    out.push_back(v2);
  }
  return out;
}

// A stream of 10 C tokens per sequence, ragged: a prefill, then steps of 0 to 9 tokens (n <= C - W).
std::vector<std::vector<int32_t>> schedule() {
  std::vector<std::vector<int32_t>> steps = {{10, 3, 0}};
  uint32_t state = 12345;
  auto next = [&](int32_t m) {
    state = state * 1103515245u + 12345u;
    return int32_t((state >> 16) % uint32_t(m));
  };
  std::vector<int32_t> totals(kBatch, 0);
  while (*std::min_element(totals.begin(), totals.end()) < 10 * kCapacity) {
    std::vector<int32_t> counts(kBatch);
    for (int32_t b = 0; b < kBatch; ++b) {
      const int32_t count = next(5) == 0 ? 0 : 1 + next(kCapacity - kWindow - 1);
      counts[size_t(b)] = totals[size_t(b)] < 12 * kCapacity ? count : 0;
      totals[size_t(b)] += counts[size_t(b)];
    }
    steps.push_back(counts);
  }
  return steps;
}

struct Inputs {
  std::vector<float> q, k, v;
};

struct Runner {
  const RingCase& c;
  const mha::DecodeKernel* kernel;
  mha::CachePath path;
  mha::ParallelAttention* parallel;
  mha::DecodeScratch scratch;
  mha::Workspace tiled;

  Status attend(mha::KVCache& cache, const Inputs& in, int32_t n, const int32_t* counts, std::vector<float>& out,
                std::vector<float>& lse, int32_t window = kWindow) {
    const int32_t qw = c.heads * c.dh, kw = c.kv_heads * c.dh, vw = c.kv_heads * c.value_dim(),
                  ow = c.heads * c.value_dim();
    mha::CacheAttendArgs args;
    args.new_tokens = n;
    args.new_token_counts = counts;
    args.q = {in.q.data(), int64_t{n} * qw, qw};
    args.k = {in.k.data(), int64_t{n} * kw, kw};
    args.v = {in.v.data(), int64_t{n} * vw, vw};
    args.out = {out.data(), int64_t{n} * ow, ow};
    args.lse = lse.data();
    args.options() = c.options();
    args.window_left = window;
    args.num_heads = c.heads;
    args.kernel = kernel;
    args.path = path;
    return mha::cache_attend(cache, args, scratch, parallel, tiled);
  }
};

std::unique_ptr<mha::KVCache> make_cache(const RingCase& c, int32_t capacity, bool ring) {
  std::unique_ptr<mha::KVCache> cache;
  mha::KVCacheConfig config{kBatch, c.kv_heads, c.dh, capacity, c.dtype, c.dv};
  config.ring = ring;
  REQUIRE(mha::KVCache::create(config, cache) == Status::kOk);
  return cache;
}

// The stream through a ring and a plain cache; returns the ring's outputs (thread-count comparison).
std::vector<float> check_against_plain(const RingCase& c, const mha::DecodeKernel* kernel, mha::CachePath path,
                                       int threads) {
  std::unique_ptr<mha::ParallelAttention> parallel;
  if (threads > 1) parallel = std::make_unique<mha::ParallelAttention>(threads);
  Runner ringed{c, kernel, path, parallel.get(), {}, {}};
  Runner plained{c, kernel, path, nullptr, {}, {}};
  std::unique_ptr<mha::KVCache> ring = make_cache(c, kCapacity, true);
  std::unique_ptr<mha::KVCache> plain = make_cache(c, kPositions, false);
  const int32_t ow = c.heads * c.value_dim(), qw = c.heads * c.dh, kw = c.kv_heads * c.dh,
                vw = c.kv_heads * c.value_dim();
  std::vector<float> outputs;
  uint64_t seed = 900;
  bool wrapped = false;
  std::vector<std::vector<int32_t>> steps = schedule();
  for (size_t step = 0; step < steps.size(); ++step) {
    const std::vector<int32_t> counts = steps[step];
    int32_t n = 1;
    for (int32_t count : counts) n = std::max(n, count);
    const Inputs in{mha_test::random_tensor(size_t(kBatch) * n * qw, seed += 3),
                    mha_test::random_tensor(size_t(kBatch) * n * kw, seed + 1),
                    mha_test::random_tensor(size_t(kBatch) * n * vw, seed + 2)};
    std::vector<float> out(size_t(kBatch) * n * ow), expected(out.size());
    std::vector<float> lse(size_t(kBatch) * c.heads * n), expected_lse(lse.size());
    INFO("step " << step << " of " << steps.size() << ", lengths " << plain->length(0) << " " << plain->length(1) << " "
                 << plain->length(2) << ", counts " << counts[0] << " " << counts[1] << " " << counts[2]);
    REQUIRE(ringed.attend(*ring, in, n, counts.data(), out, lse) == Status::kOk);
    REQUIRE(plained.attend(*plain, in, n, counts.data(), expected, expected_lse) == Status::kOk);
    for (int32_t b = 0; b < kBatch; ++b) {
      INFO("sequence " << b << " at length " << ring->length(b) << ", step of " << counts[size_t(b)]);
      REQUIRE(ring->length(b) == plain->length(b));
      REQUIRE(ring->stored(b) == std::min(ring->length(b), kCapacity));
      wrapped |= ring->length(b) > kCapacity;
    }
    if (!wrapped) {  // one run of slots: the plain cache's call exactly
      REQUIRE(mha_test::bit_equal(out, expected));
      REQUIRE(mha_test::bit_equal(lse, expected_lse));
    } else {
      REQUIRE(mha_test::first_not_close(out, expected, 2e-6f, 2e-5f) == -1);
      REQUIRE(mha_test::first_not_close(lse, expected_lse, 2e-5f, 2e-5f) == -1);
    }
    outputs.insert(outputs.end(), out.begin(), out.end());
    outputs.insert(outputs.end(), lse.begin(), lse.end());
    // After the stream, steps that bring every sequence to the same length (read's range is common).
    if (step + 1 == steps.size() && !ring->uniform()) {
      std::vector<int32_t> even(kBatch);
      for (int32_t b = 0; b < kBatch; ++b) even[size_t(b)] = std::min(9, ring->max_length() - ring->length(b));
      steps.push_back(even);
    }
  }
  REQUIRE(wrapped);
  REQUIRE(ring->min_length() > 5 * kCapacity);
  REQUIRE(ring->uniform());
  // The stored positions read back as the plain cache's.
  const int32_t first = ring->first_readable(), last = ring->min_length();
  REQUIRE(first == ring->max_length() - kCapacity);
  const size_t tokens = size_t(kBatch) * (last - first);
  std::vector<float> k(tokens * kw), v(tokens * vw), k_plain(k.size()), v_plain(v.size());
  REQUIRE(ring->read(k.data(), v.data(), first, last) == Status::kOk);
  REQUIRE(plain->read(k_plain.data(), v_plain.data(), first, last) == Status::kOk);
  REQUIRE(mha_test::bit_equal(k, k_plain));
  REQUIRE(mha_test::bit_equal(v, v_plain));
  REQUIRE(ring->read(k.data(), v.data(), first - 1, last) == Status::kCacheBadLength);
  return outputs;
}

}  // namespace

TEST_CASE("ring cache: a stream of 10 C tokens equals a plain cache with the same window", "[decode][ring]") {
  for (const RingCase& c : cases()) {
    INFO("dtype " << static_cast<int>(c.dtype) << " Dv " << c.value_dim() << " rope " << c.rotary_dim << " sinks "
                  << !c.sinks.empty() << " softcap " << c.softcap);
    for (const mha::DecodeKernel* kernel : mha::decode_kernel_variants()) {
      INFO("decode kernel " << mha::decode_kernel_name(*kernel));
      const std::vector<float> outputs = check_against_plain(c, kernel, mha::CachePath::kAuto, 1);
#if !defined(__EMSCRIPTEN__)  // this wasm test binary has no threads (CMakeLists.txt)
      REQUIRE(mha_test::bit_equal(check_against_plain(c, kernel, mha::CachePath::kAuto, 3), outputs));
#endif
    }
    check_against_plain(c, nullptr, mha::CachePath::kExactRows, 1);
  }
}

TEST_CASE("ring cache: the window rule and truncate refuse overwritten tokens, changing nothing", "[kv_cache][ring]") {
  RingCase c;
  std::unique_ptr<mha::KVCache> ring = make_cache(c, kCapacity, true);
  Runner run{c, nullptr, mha::CachePath::kAuto, nullptr, {}, {}};
  const int32_t qw = c.heads * c.dh, kw = c.kv_heads * c.dh;
  auto inputs = [&](int32_t n, uint64_t seed) {
    return Inputs{mha_test::random_tensor(size_t(kBatch) * n * qw, seed),
                  mha_test::random_tensor(size_t(kBatch) * n * kw, seed + 1),
                  mha_test::random_tensor(size_t(kBatch) * n * kw, seed + 2)};
  };
  std::vector<float> out(size_t(kBatch) * 10 * qw), lse(size_t(kBatch) * c.heads * 10);
  // No window, or W + n > C: refused, nothing stored.
  REQUIRE(run.attend(*ring, inputs(1, 1), 1, nullptr, out, lse, -1) == Status::kCacheRingWindow);
  REQUIRE(run.attend(*ring, inputs(10, 1), 10, nullptr, out, lse, kCapacity - 9) == Status::kCacheRingWindow);
  REQUIRE(ring->max_length() == 0);
  // Past the capacity: 45 tokens, 40 stored.
  for (int32_t i = 0; i < 9; ++i) REQUIRE(run.attend(*ring, inputs(5, 10 + i), 5, nullptr, out, lse) == Status::kOk);
  REQUIRE(ring->length(0) == 45);
  REQUIRE(ring->stored(0) == kCapacity);
  REQUIRE(ring->first_readable() == 5);
  // truncate may remove only stored tokens: to 5 (40 removed) yes, below no.
  REQUIRE(ring->truncate(4) == Status::kCacheBadLength);
  REQUIRE(ring->length(0) == 45);
  REQUIRE(ring->truncate(30) == Status::kOk);
  REQUIRE(ring->stored(0) == 25);
  // Now positions [5, 30) are stored: a window of 26 would reach position 4, which the ring overwrote.
  REQUIRE(run.attend(*ring, inputs(1, 30), 1, nullptr, out, lse, 26) == Status::kCacheRingWindow);
  REQUIRE(ring->length(0) == 30);
  REQUIRE(run.attend(*ring, inputs(1, 30), 1, nullptr, out, lse, 25) == Status::kOk);
  REQUIRE(ring->length(0) == 31);
  REQUIRE(ring->stored(0) == 26);
  // A ring and a prefix do not combine.
  std::unique_ptr<mha::KVCache> prefix;
  REQUIRE(mha::KVCache::create({1, c.kv_heads, c.dh, 8, c.dtype, 0}, prefix) == Status::kOk);
  mha::CacheAttendArgs args;
  const Inputs in = inputs(1, 50);
  args.new_tokens = 1;
  args.q = {in.q.data(), qw, qw};
  args.k = {in.k.data(), kw, kw};
  args.v = {in.v.data(), kw, kw};
  args.out = {out.data(), qw, qw};
  args.options() = c.options();
  args.num_heads = c.heads;
  args.prefix = prefix.get();
  REQUIRE(mha::cache_attend(*ring, args, run.scratch, nullptr, run.tiled) == Status::kCacheBadPrefix);
  REQUIRE(ring->length(0) == 31);
}

TEST_CASE("ring cache: save and load keep the ring, its positions and stored counts; bad ring fields refused",
          "[kv_cache][ring]") {
  for (CacheDType dtype :
       {CacheDType::kFloat32, CacheDType::kFloat16, CacheDType::kBFloat16, CacheDType::kInt8, CacheDType::kInt4}) {
    INFO("dtype " << static_cast<int>(dtype));
    RingCase c;
    c.dtype = dtype;
    std::unique_ptr<mha::KVCache> ring = make_cache(c, kCapacity, true);
    Runner run{c, nullptr, mha::CachePath::kAuto, nullptr, {}, {}};
    const int32_t qw = c.heads * c.dh, kw = c.kv_heads * c.dh;
    std::vector<float> out(size_t(kBatch) * 9 * qw), lse(size_t(kBatch) * c.heads * 9);
    for (int32_t i = 0; i < 12; ++i) {
      const Inputs in{mha_test::random_tensor(size_t(kBatch) * 9 * qw, 100 + i),
                      mha_test::random_tensor(size_t(kBatch) * 9 * kw, 200 + i),
                      mha_test::random_tensor(size_t(kBatch) * 9 * kw, 300 + i)};
      const std::vector<int32_t> counts = {9, 4, int32_t(i % 3)};
      REQUIRE(run.attend(*ring, in, 9, counts.data(), out, lse) == Status::kOk);
    }
    const std::vector<int32_t> kept = {100, 40, 12};  // sequence 0 loses 8 tokens: 32 stored
    REQUIRE(ring->truncate_each(kept.data()) == Status::kOk);
    std::vector<uint8_t> bytes(size_t(mha::KVCacheStorage::saved_bytes(*ring)));
    REQUIRE(mha::KVCacheStorage::save(*ring, bytes.data(), int64_t(bytes.size())) == Status::kOk);
    for (int32_t capacity : {0, 32, 3 * kCapacity}) {
      INFO("loaded with capacity " << capacity);
      std::unique_ptr<mha::KVCache> loaded;
      mha::LoadMessage why;
      REQUIRE(mha::KVCacheStorage::load(bytes.data(), int64_t(bytes.size()), capacity, loaded, &why) == Status::kOk);
      REQUIRE(loaded->config().ring);
      for (int32_t b = 0; b < kBatch; ++b) {
        REQUIRE(loaded->length(b) == ring->length(b));
        REQUIRE(loaded->stored(b) == ring->stored(b));
        for (int32_t p = ring->length(b) - ring->stored(b); p < ring->length(b); ++p)
          for (int32_t d = 0; d < c.dh; ++d) {
            REQUIRE(loaded->key(b, 1, loaded->slot(p), d) == ring->key(b, 1, ring->slot(p), d));
            REQUIRE(loaded->value(b, 1, loaded->slot(p), d) == ring->value(b, 1, ring->slot(p), d));
          }
      }
      if (capacity == 0) {  // the same ring: save gives the bytes back
        std::vector<uint8_t> again(bytes.size());
        REQUIRE(mha::KVCacheStorage::save(*loaded, again.data(), int64_t(again.size())) == Status::kOk);
        REQUIRE(again == bytes);
      }
    }
    std::unique_ptr<mha::KVCache> loaded;
    REQUIRE(mha::KVCacheStorage::load(bytes.data(), int64_t(bytes.size()), 31, loaded, nullptr) ==
            Status::kCacheBadLength);  // below the 32 tokens sequences 0 and 1 store
  }
  // A ring's fields, corrupted (the checksum recomputed, so that each field's own check answers).
  RingCase c;
  std::unique_ptr<mha::KVCache> ring = make_cache(c, 8, true);
  std::vector<uint8_t> bytes(size_t(mha::KVCacheStorage::saved_bytes(*ring)));
  REQUIRE(mha::KVCacheStorage::save(*ring, bytes.data(), int64_t(bytes.size())) == Status::kOk);
  auto refused = [&](int64_t at, uint32_t value, const char* expected) {
    std::vector<uint8_t> b = bytes;
    std::memcpy(b.data() + at, &value, 4);
    const uint32_t crc = mha::crc32(b.data(), int64_t(b.size()) - 4);
    std::memcpy(b.data() + b.size() - 4, &crc, 4);
    std::unique_ptr<mha::KVCache> loaded;
    mha::LoadMessage why;
    REQUIRE(mha::KVCacheStorage::load(b.data(), int64_t(b.size()), 0, loaded, &why) == Status::kCacheBadSave);
    INFO(why.text);
    REQUIRE(std::string(why.text).find(expected) != std::string::npos);
    REQUIRE(!loaded);
  };
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  REQUIRE(version == 3);
  refused(40, 0, "expected 0x00000001, 0 in a version 3 save");  // a version 3 save without the ring flag
  refused(8, 1, "expected 0x00000000, 0 in a version 1 save");   // the ring flag in a version 1 save
  refused(48 + 4 * kBatch, 1, "stored[0] is 1, outside [0, min(lengths[0] = 0");  // more stored than appended
}
