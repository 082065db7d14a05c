// A shared prefix (docs/spec.md 5.2): a cache whose sequences continue one batch-1 prefix cache gives what a
// cache holding a copy of the prefix in every sequence gives (within float32 rounding: the two partial
// states are merged by their log-sum-exp), out and lse, for every dtype (the same stored values), every
// decode kernel and the exact rows, GQA and MQA, windows that see all, some or none of the prefix, softcap,
// ALiBi, sinks, rope at the true positions, Dv != Dh, ragged new tokens and a prefill over the prefix; the
// same bits on 1 and 3 threads; and a prefix that does not match is refused with nothing stored.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "mha/cache/kv_cache.hpp"
#include "mha/core/parallel.hpp"
#include "mha/decode/decode.hpp"
#include "strided_call.hpp"
#include "test_util.hpp"

using mha::CacheDType;
using mha::Status;

namespace {

constexpr int32_t kBatch = 4, kPositions = 256;

struct PrefixCase {
  CacheDType dtype = CacheDType::kFloat32;
  int32_t heads = 4, kv_heads = 2, dh = 16, dv = 0, prefix_length = 45;
  int32_t window_left = -1;
  float softcap = 0.0f;
  std::vector<float> sinks, alibi, cos, sin;
  int32_t rotary_dim = 0;

  int32_t value_dim() const { return dv > 0 ? dv : dh; }
  mha::AttentionOptions options() const {
    mha::AttentionOptions o;
    o.causal = true;
    o.window_left = window_left;
    o.softcap = softcap;
    o.scale = mha::default_scale(dh);
    o.sinks = sinks.empty() ? nullptr : sinks.data();
    o.alibi_slopes = alibi.empty() ? nullptr : alibi.data();
    if (rotary_dim > 0) o.rope = mha::RotaryTables{cos.data(), sin.data(), kPositions, rotary_dim, false};
    return o;
  }
};

std::vector<PrefixCase> cases() {
  std::vector<PrefixCase> out;
  for (CacheDType dtype :
       {CacheDType::kFloat32, CacheDType::kFloat16, CacheDType::kBFloat16, CacheDType::kInt8, CacheDType::kInt4}) {
    PrefixCase plain;
    plain.dtype = dtype;
    out.push_back(plain);
    PrefixCase v3 = plain;  // rope, sinks and a value head of its own size
    v3.dv = 12;
    v3.sinks = {0.5f, -1.0f, 2.0f, 0.0f};
    v3.rotary_dim = 16;
    mha_test::rope_tables(16, kPositions, 10000.0, v3.cos, v3.sin);
    out.push_back(v3);
    PrefixCase v2 = plain;  // a window that sees part of the prefix, softcap and ALiBi
    v2.window_left = 50;
    v2.softcap = 5.0f;
    v2.alibi = {0.25f, 0.5f, 0.125f, 1.0f};
    out.push_back(v2);
  }
  PrefixCase mqa;  // one KV head for four query heads; a window that soon sees none of the prefix
  mqa.kv_heads = 1;
  mqa.window_left = 3;
  out.push_back(mqa);
  PrefixCase empty_prefix;  // Lp = 0: the prefix pass has no key, every row's prefix part is empty
  empty_prefix.prefix_length = 0;
  out.push_back(empty_prefix);
  return out;
}

// Steps of new tokens per sequence: a prefill over the prefix (20 rows: the decode kernel, as every prefix
// call), sequences left empty, ragged decode steps.
const std::vector<std::vector<int32_t>>& schedule() {
  static const std::vector<std::vector<int32_t>> steps = {
      {20, 5, 0, 1}, {1, 1, 1, 1}, {3, 0, 2, 1}, {1, 1, 0, 1}, {0, 40, 1, 1}, {1, 1, 1, 1},
  };
  return steps;
}

struct Inputs {
  std::vector<float> q, k, v;  // (B, n, H*Dh), (B, n, Hkv*Dh), (B, n, Hkv*Dv)
};

struct Runner {
  const PrefixCase& c;
  const mha::DecodeKernel* kernel;
  mha::CachePath path;
  mha::ParallelAttention* parallel;
  mha::DecodeScratch scratch;
  mha::Workspace tiled;
  int64_t out_batch_pad = 0;  // floats between one sequence's rows of out and the next's (a strided out)

  Status attend(mha::KVCache& cache, const mha::KVCache* prefix, const Inputs& in, int32_t n, const int32_t* counts,
                std::vector<float>& out, std::vector<float>& lse) {
    const int32_t qw = c.heads * c.dh, kw = c.kv_heads * c.dh, vw = c.kv_heads * c.value_dim(),
                  ow = c.heads * c.value_dim();
    mha::CacheAttendArgs args;
    args.new_tokens = n;
    args.new_token_counts = counts;
    args.q = {in.q.data(), int64_t{n} * qw, qw};
    args.k = {in.k.data(), int64_t{n} * kw, kw};
    args.v = {in.v.data(), int64_t{n} * vw, vw};
    args.out = {out.data(), int64_t{n} * ow + out_batch_pad, ow};
    args.lse = lse.data();
    args.options() = c.options();
    args.num_heads = c.heads;
    args.kernel = kernel;
    args.path = path;
    args.prefix = prefix;
    return mha::cache_attend(cache, args, scratch, parallel, tiled);
  }
};

std::unique_ptr<mha::KVCache> make_cache(const PrefixCase& c, int32_t batch, int32_t capacity) {
  std::unique_ptr<mha::KVCache> cache;
  REQUIRE(mha::KVCache::create({batch, c.kv_heads, c.dh, capacity, c.dtype, c.dv}, cache) == Status::kOk);
  return cache;
}

// The prefix cache, and a cache of B sequences that each hold a copy of it (keys rotated at [0, Lp)).
void fill_prefix(const PrefixCase& c, mha::KVCache& prefix, mha::KVCache& copies) {
  if (c.prefix_length == 0) return;
  const int32_t lp = c.prefix_length, kw = c.kv_heads * c.dh, vw = c.kv_heads * c.value_dim();
  const std::vector<float> k = mha_test::random_tensor(size_t(lp) * kw, 91);
  const std::vector<float> v = mha_test::random_tensor(size_t(lp) * vw, 92);
  const mha::RotaryTables rope = c.options().rope;
  REQUIRE(prefix.append({k.data(), int64_t{lp} * kw, kw}, {v.data(), int64_t{lp} * vw, vw}, lp, &rope) == Status::kOk);
  // Every sequence reads the same rows: batch stride 0.
  REQUIRE(copies.append({k.data(), 0, kw}, {v.data(), 0, vw}, lp, &rope) == Status::kOk);
}

// The schedule through a cache over a shared prefix and through one holding copies: every real row of out
// and lse within float32 rounding. Returns the prefix runs' outputs, for the thread-count comparison.
std::vector<float> check_against_copies(const PrefixCase& c, const mha::DecodeKernel* kernel, mha::CachePath path,
                                        int threads) {
  std::unique_ptr<mha::ParallelAttention> parallel;
  if (threads > 1) parallel = std::make_unique<mha::ParallelAttention>(threads);
  Runner shared{c, kernel, path, parallel.get(), {}, {}, 13};  // its out strided: the parts' staging is dense
  Runner copied{c, kernel, path, nullptr, {}, {}};
  std::unique_ptr<mha::KVCache> prefix = make_cache(c, 1, 64);
  std::unique_ptr<mha::KVCache> own = make_cache(c, kBatch, 128);
  std::unique_ptr<mha::KVCache> copies = make_cache(c, kBatch, 128 + 64);
  fill_prefix(c, *prefix, *copies);
  const int32_t ow = c.heads * c.value_dim(), qw = c.heads * c.dh, kw = c.kv_heads * c.dh,
                vw = c.kv_heads * c.value_dim();
  std::vector<float> all_outputs;
  uint64_t seed = 700;
  for (const std::vector<int32_t>& counts : schedule()) {
    int32_t n = 1;
    for (int32_t count : counts) n = std::max(n, count);
    const Inputs in{mha_test::random_tensor(size_t(kBatch) * n * qw, seed += 3),
                    mha_test::random_tensor(size_t(kBatch) * n * kw, seed + 1),
                    mha_test::random_tensor(size_t(kBatch) * n * vw, seed + 2)};
    std::vector<float> strided(size_t(kBatch) * (int64_t{n} * ow + shared.out_batch_pad), 777.0f);
    std::vector<float> out(size_t(kBatch) * n * ow), expected(out.size(), 777.0f);
    std::vector<float> lse(size_t(kBatch) * c.heads * n, 777.0f), expected_lse(lse.size(), 777.0f);
    REQUIRE(shared.attend(*own, prefix.get(), in, n, counts.data(), strided, lse) == Status::kOk);
    for (int32_t b = 0; b < kBatch; ++b)
      std::copy_n(strided.begin() + b * (int64_t{n} * ow + shared.out_batch_pad), int64_t{n} * ow,
                  out.begin() + int64_t{b} * n * ow);
    REQUIRE(copied.attend(*copies, nullptr, in, n, counts.data(), expected, expected_lse) == Status::kOk);
    REQUIRE(prefix->length(0) == c.prefix_length);
    for (int32_t b = 0; b < kBatch; ++b) REQUIRE(own->length(b) + c.prefix_length == copies->length(b));
    INFO("step of n = " << n << ", new tokens " << counts[0] << " " << counts[1] << " " << counts[2] << " "
                        << counts[3]);
    REQUIRE(mha_test::first_not_close(out, expected, 2e-6f, 2e-5f) == -1);
    REQUIRE(mha_test::first_not_close(lse, expected_lse, 2e-5f, 2e-5f) == -1);
    all_outputs.insert(all_outputs.end(), out.begin(), out.end());
    all_outputs.insert(all_outputs.end(), lse.begin(), lse.end());
  }
  return all_outputs;
}

}  // namespace

TEST_CASE("shared prefix: equals a copy of the prefix in every sequence, every dtype, kernel and option",
          "[decode][prefix]") {
  for (const PrefixCase& c : cases()) {
    INFO("dtype " << static_cast<int>(c.dtype) << " Hkv " << c.kv_heads << " Dv " << c.value_dim() << " rope "
                  << c.rotary_dim << " sinks " << !c.sinks.empty() << " window " << c.window_left << " Lp "
                  << c.prefix_length);
    std::vector<float> first;
    for (const mha::DecodeKernel* kernel : mha::decode_kernel_variants()) {
      INFO("decode kernel " << mha::decode_kernel_name(*kernel));
      const std::vector<float> outputs = check_against_copies(c, kernel, mha::CachePath::kAuto, 1);
      if (first.empty()) first = outputs;
#if !defined(__EMSCRIPTEN__)  // this wasm test binary has no threads (CMakeLists.txt)
      const std::vector<float> threaded = check_against_copies(c, kernel, mha::CachePath::kAuto, 3);
      REQUIRE(mha_test::bit_equal(threaded, outputs));
#endif
    }
    check_against_copies(c, nullptr, mha::CachePath::kExactRows, 1);
  }
}

TEST_CASE("shared prefix: a prefix that does not match is refused, nothing stored", "[kv_cache][prefix]") {
  PrefixCase c;
  std::unique_ptr<mha::KVCache> cache = make_cache(c, kBatch, 64);
  std::unique_ptr<mha::KVCache> good = make_cache(c, 1, 64);
  PrefixCase other_dim = c;
  other_dim.dv = 8;
  PrefixCase other_heads = c;
  other_heads.kv_heads = 1;
  PrefixCase other_dtype = c;
  other_dtype.dtype = CacheDType::kFloat16;
  std::vector<std::unique_ptr<mha::KVCache>> bad;
  bad.push_back(make_cache(c, 2, 64));
  bad.push_back(make_cache(other_dim, 1, 64));
  bad.push_back(make_cache(other_heads, 1, 64));
  bad.push_back(make_cache(other_dtype, 1, 64));
  const int32_t qw = c.heads * c.dh, kw = c.kv_heads * c.dh, ow = c.heads * c.dh;
  const Inputs in{mha_test::random_tensor(size_t(kBatch) * qw, 1), mha_test::random_tensor(size_t(kBatch) * kw, 2),
                  mha_test::random_tensor(size_t(kBatch) * kw, 3)};
  std::vector<float> out(size_t(kBatch) * ow, 5.0f), lse(size_t(kBatch) * c.heads, 5.0f);
  Runner run{c, nullptr, mha::CachePath::kAuto, nullptr, {}, {}};
  for (const std::unique_ptr<mha::KVCache>& prefix : bad) {
    REQUIRE(run.attend(*cache, prefix.get(), in, 1, nullptr, out, lse) == Status::kCacheBadPrefix);
  }
  REQUIRE(run.attend(*cache, cache.get(), in, 1, nullptr, out, lse) == Status::kCacheBadPrefix);
  for (int32_t b = 0; b < kBatch; ++b) REQUIRE(cache->length(b) == 0);
  REQUIRE(out == std::vector<float>(out.size(), 5.0f));
  // Rope tables that end before the last position counted from the prefix: nothing stored either.
  PrefixCase roped = c;
  roped.rotary_dim = 16;
  mha_test::rope_tables(16, kPositions, 10000.0, roped.cos, roped.sin);
  std::unique_ptr<mha::KVCache> long_prefix = make_cache(roped, 1, kPositions);
  const std::vector<float> filler = mha_test::random_tensor(size_t(kPositions) * kw, 4);
  REQUIRE(long_prefix->append({filler.data(), int64_t{kPositions} * kw, kw},
                              {filler.data(), int64_t{kPositions} * kw, kw}, kPositions) == Status::kOk);
  Runner roped_run{roped, nullptr, mha::CachePath::kAuto, nullptr, {}, {}};
  REQUIRE(roped_run.attend(*cache, long_prefix.get(), in, 1, nullptr, out, lse) == Status::kRopePosition);
  for (int32_t b = 0; b < kBatch; ++b) REQUIRE(cache->length(b) == 0);
  REQUIRE(run.attend(*cache, good.get(), in, 1, nullptr, out, lse) == Status::kOk);
}

TEST_CASE("shared prefix: a decode step reads the prefix's keys once for all sequences", "[decode][prefix]") {
  PrefixCase c;
  c.heads = 2;
  c.kv_heads = 2;  // MHA: one query row per KV head and sequence
  const int32_t lp = 1500, kw = c.kv_heads * c.dh, qw = c.heads * c.dh;
  std::unique_ptr<mha::KVCache> prefix = make_cache(c, 1, lp);
  std::unique_ptr<mha::KVCache> cache = make_cache(c, kBatch, 16);
  const std::vector<float> filler = mha_test::random_tensor(size_t(lp) * kw, 4);
  REQUIRE(prefix->append({filler.data(), int64_t{lp} * kw, kw}, {filler.data(), int64_t{lp} * kw, kw}, lp) ==
          Status::kOk);
  const Inputs in{mha_test::random_tensor(size_t(kBatch) * qw, 1), mha_test::random_tensor(size_t(kBatch) * kw, 2),
                  mha_test::random_tensor(size_t(kBatch) * kw, 3)};
  std::vector<float> out(size_t(kBatch) * qw), lse(size_t(kBatch) * c.heads);
  for (const mha::DecodeKernel* kernel : mha::decode_kernel_variants()) {
    Runner run{c, kernel, mha::CachePath::kAuto, nullptr, {}, {}};
    REQUIRE(run.attend(*cache, prefix.get(), in, 1, nullptr, out, lse) == Status::kOk);
    // Each KV head's Lp keys once: not B times.
    REQUIRE(run.scratch.counters.prefix_keys.load() == int64_t{c.kv_heads} * lp);
  }
}
