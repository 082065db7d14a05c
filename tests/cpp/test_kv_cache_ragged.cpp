// Sequences of different lengths in one cache (docs/spec.md 4.6): every sequence of a ragged batch gives,
// bit for bit, what it gives alone in a batch of 1 with the same steps, through every decode kernel
// variant, the tiled prefill and the exact rows, for float32 and float16 caches, with the v0.3 options,
// on 1 and 3 threads, out and lse alike; padding rows are not read (they hold NaN here), their out rows are
// 0 and their lse -inf; and the statuses of bad counts, truncations and reads change nothing.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "mha/decode/decode.hpp"
#include "mha/cache/kv_cache.hpp"
#include "mha/core/parallel.hpp"
#include "test_util.hpp"
#include "strided_call.hpp"

using mha::CacheDType;
using mha::Status;

namespace {

constexpr int32_t kBatch = 4;

// One step of the schedule: counts (B) of new tokens (n = their max), or a truncate_each to `lengths`.
struct Step {
  std::vector<int32_t> counts;
  std::vector<int32_t> lengths;
};

// Sequence 0 and 3 start with a tiled prefill (empty, >= 16 rows), sequence 1 with a short one through
// the decode kernel; sequence 2 stays empty, then gets a tiled prefill beside the others' decode steps.
const std::vector<Step>& schedule() {
  static const std::vector<Step> steps = {
      {{37, 5, 0, 20}, {}}, {{1, 1, 0, 1}, {}}, {{3, 0, 17, 1}, {}}, {{}, {30, 6, 10, 21}},
      {{1, 1, 1, 0}, {}},   {{2, 2, 2, 2}, {}}, {{0, 0, 0, 0}, {}},  {{1, 40, 1, 1}, {}},
  };
  return steps;
}

struct RaggedCase {
  CacheDType dtype = CacheDType::kFloat32;
  int32_t heads = 4, kv_heads = 2, dh = 16, dv = 0;
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
    if (rotary_dim > 0) o.rope = mha::RotaryTables{cos.data(), sin.data(), 128, rotary_dim, false};
    return o;
  }
};

std::vector<RaggedCase> cases() {
  std::vector<RaggedCase> out;
  for (CacheDType dtype : {CacheDType::kFloat32, CacheDType::kFloat16}) {
    RaggedCase plain;
    plain.dtype = dtype;
    out.push_back(plain);
    RaggedCase v3 = plain;  // rope, sinks and a value head of its own size
    v3.dv = 12;
    v3.sinks = {0.5f, -1.0f, 2.0f, 0.0f};
    v3.rotary_dim = 16;
    mha_test::rope_tables(16, 128, 10000.0, v3.cos, v3.sin);
    out.push_back(v3);
    RaggedCase v2 = plain;  // a window, softcap and ALiBi
    v2.window_left = 7;
    v2.softcap = 5.0f;
    v2.alibi = {0.25f, 0.5f, 0.125f, 1.0f};
    out.push_back(v2);
  }
  return out;
}

struct Inputs {
  std::vector<float> q, k, v;  // (B, n, H*Dh), (B, n, Hkv*Dh), (B, n, Hkv*Dv); padding rows NaN
};

Inputs step_inputs(const RaggedCase& c, const std::vector<int32_t>& counts, int32_t n, uint64_t seed) {
  const int32_t qw = c.heads * c.dh, kw = c.kv_heads * c.dh, vw = c.kv_heads * c.value_dim();
  Inputs in{mha_test::random_tensor(size_t(kBatch) * n * qw, seed),
            mha_test::random_tensor(size_t(kBatch) * n * kw, seed + 1),
            mha_test::random_tensor(size_t(kBatch) * n * vw, seed + 2)};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int32_t b = 0; b < kBatch; ++b)
    for (int32_t i = counts[size_t(b)]; i < n; ++i) {
      std::fill_n(in.q.begin() + (int64_t{b} * n + i) * qw, qw, nan);
      std::fill_n(in.k.begin() + (int64_t{b} * n + i) * kw, kw, nan);
      std::fill_n(in.v.begin() + (int64_t{b} * n + i) * vw, vw, nan);
    }
  return in;
}

struct Runner {
  const RaggedCase& c;
  const mha::DecodeKernel* kernel;
  mha::CachePath path;
  mha::ParallelAttention* parallel;
  mha::DecodeScratch scratch;
  mha::Workspace tiled;

  // One attend of `batch` sequences, rows [0, n) of sequences [first, first + batch) of the inputs.
  void attend(mha::KVCache& cache, const Inputs& in, int32_t first, int32_t n, const int32_t* counts,
              std::vector<float>& out, float* lse = nullptr) {
    const int32_t qw = c.heads * c.dh, kw = c.kv_heads * c.dh, vw = c.kv_heads * c.value_dim(),
                  ow = c.heads * c.value_dim();
    mha::CacheAttendArgs args;
    args.new_tokens = n;
    args.new_token_counts = counts;
    args.q = {in.q.data() + int64_t{first} * n * qw, int64_t{n} * qw, qw};
    args.k = {in.k.data() + int64_t{first} * n * kw, int64_t{n} * kw, kw};
    args.v = {in.v.data() + int64_t{first} * n * vw, int64_t{n} * vw, vw};
    args.out = {out.data(), int64_t{n} * ow, ow};
    args.lse = lse;
    args.options() = c.options();
    args.num_heads = c.heads;
    args.kernel = kernel;
    args.path = path;
    REQUIRE(mha::cache_attend(cache, args, scratch, parallel, tiled) == Status::kOk);
  }
};

std::unique_ptr<mha::KVCache> make_cache(const RaggedCase& c, int32_t batch) {
  std::unique_ptr<mha::KVCache> cache;
  REQUIRE(mha::KVCache::create({batch, c.kv_heads, c.dh, 128, c.dtype, c.dv}, cache) == Status::kOk);
  return cache;
}

// The schedule through one ragged cache and through B caches of one sequence each: every real out row
// bit-identical, every padding out row 0, the lengths equal.
void check_against_alone(const RaggedCase& c, const mha::DecodeKernel* kernel, mha::CachePath path, int threads) {
  std::unique_ptr<mha::ParallelAttention> parallel;
  if (threads > 1) parallel = std::make_unique<mha::ParallelAttention>(threads);
  Runner together{c, kernel, path, parallel.get(), {}, {}};
  Runner alone{c, kernel, path, nullptr, {}, {}};  // one thread: also checks thread-count independence
  std::unique_ptr<mha::KVCache> batch = make_cache(c, kBatch);
  std::vector<std::unique_ptr<mha::KVCache>> single;
  for (int32_t b = 0; b < kBatch; ++b) single.push_back(make_cache(c, 1));
  const int32_t ow = c.heads * c.value_dim();
  uint64_t seed = 500;
  for (const Step& step : schedule()) {
    if (!step.lengths.empty()) {
      REQUIRE(batch->truncate_each(step.lengths.data()) == Status::kOk);
      for (int32_t b = 0; b < kBatch; ++b) REQUIRE(single[size_t(b)]->truncate(step.lengths[size_t(b)]) == Status::kOk);
      continue;
    }
    int32_t n = 1;
    for (int32_t count : step.counts) n = std::max(n, count);
    const Inputs in = step_inputs(c, step.counts, n, seed += 3);
    std::vector<float> out(size_t(kBatch) * n * ow, 777.0f);
    std::vector<float> lse(size_t(kBatch) * c.heads * n, 777.0f);  // (B, H, n)
    together.attend(*batch, in, 0, n, step.counts.data(), out, lse.data());
    for (int32_t b = 0; b < kBatch; ++b) {
      const int32_t count = step.counts[size_t(b)];
      INFO("sequence " << b << " of a step of n = " << n << ", " << count << " real rows, length " << batch->length(b));
      for (int32_t i = count; i < n; ++i) {
        for (int32_t x = 0; x < ow; ++x) REQUIRE(out[(size_t(b) * n + i) * ow + x] == 0.0f);
        for (int32_t h = 0; h < c.heads; ++h) REQUIRE(lse[(size_t(b) * c.heads + h) * n + i] == -mha_test::kInf);
      }
      if (count == 0) continue;
      std::vector<float> own(size_t(count) * ow, -1.0f);
      Inputs mine;  // sequence b's real rows alone
      const int32_t qw = c.heads * c.dh, kw = c.kv_heads * c.dh, vw = c.kv_heads * c.value_dim();
      auto rows_of = [&](const std::vector<float>& x, int32_t width) {
        std::vector<float> rows(size_t(count) * width);
        std::memcpy(rows.data(), x.data() + int64_t{b} * n * width, rows.size() * sizeof(float));
        return rows;
      };
      mine.q = rows_of(in.q, qw);
      mine.k = rows_of(in.k, kw);
      mine.v = rows_of(in.v, vw);
      std::vector<float> own_lse(size_t(c.heads) * count, -1.0f);  // (1, H, count)
      alone.attend(*single[size_t(b)], mine, 0, count, nullptr, own, own_lse.data());
      REQUIRE(std::memcmp(own.data(), out.data() + size_t(b) * n * ow, own.size() * sizeof(float)) == 0);
      for (int32_t h = 0; h < c.heads; ++h) {
        INFO("lse of head " << h);
        REQUIRE(std::memcmp(own_lse.data() + size_t(h) * count, lse.data() + (size_t(b) * c.heads + h) * n,
                            size_t(count) * sizeof(float)) == 0);
      }
    }
    for (int32_t b = 0; b < kBatch; ++b) REQUIRE(batch->length(b) == single[size_t(b)]->length(0));
  }
}

}  // namespace

TEST_CASE("ragged cache: each sequence gives the bits it gives alone, every decode kernel and path",
          "[decode][ragged]") {
  for (const RaggedCase& c : cases()) {
    INFO("f16 " << (c.dtype == CacheDType::kFloat16) << " Dv " << c.value_dim() << " rope " << c.rotary_dim << " sinks "
                << !c.sinks.empty() << " window " << c.window_left);
    for (const mha::DecodeKernel* kernel : mha::decode_kernel_variants()) {
      INFO("decode kernel " << mha::decode_kernel_name(*kernel));
      check_against_alone(c, kernel, mha::CachePath::kAuto, 1);
      check_against_alone(c, kernel, mha::CachePath::kDecodeKernel, 1);
    }
    check_against_alone(c, nullptr, mha::CachePath::kExactRows, 1);
#if !defined(__EMSCRIPTEN__)  // this wasm test binary has no threads (CMakeLists.txt)
    check_against_alone(c, nullptr, mha::CachePath::kAuto, 3);
#endif
  }
}

TEST_CASE("ragged cache: bad counts, per-sequence capacity, truncations and reads change nothing",
          "[kv_cache][ragged]") {
  RaggedCase c;
  std::unique_ptr<mha::KVCache> cache = make_cache(c, kBatch);
  Runner run{c, nullptr, mha::CachePath::kAuto, nullptr, {}, {}};
  const std::vector<int32_t> counts = {3, 1, 0, 2};
  const Inputs in = step_inputs(c, counts, 3, 1);
  std::vector<float> out(size_t(kBatch) * 3 * c.heads * c.dh);
  run.attend(*cache, in, 0, 3, counts.data(), out);
  const std::vector<int32_t> expected = {3, 1, 0, 2};
  REQUIRE(std::vector<int32_t>(cache->lengths(), cache->lengths() + kBatch) == expected);
  REQUIRE(cache->min_length() == 0);
  REQUIRE(cache->max_length() == 3);
  REQUIRE(!cache->uniform());

  mha::CacheAttendArgs args;
  args.new_tokens = 3;
  args.q = {in.q.data(), 3 * c.heads * c.dh, c.heads * c.dh};
  args.k = {in.k.data(), 3 * c.kv_heads * c.dh, c.kv_heads * c.dh};
  args.v = {in.v.data(), 3 * c.kv_heads * c.dh, c.kv_heads * c.dh};
  args.out = {out.data(), 3 * c.heads * c.dh, c.heads * c.dh};
  args.options() = c.options();
  args.num_heads = c.heads;
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{4, 0, 0, 0}, std::vector<int32_t>{0, -1, 0, 0}}) {
    args.new_token_counts = bad.data();
    REQUIRE(mha::cache_attend(*cache, args, run.scratch, nullptr, run.tiled) == Status::kCacheBadNewTokens);
  }
  // Sequence 0 is full at 126 + 3 > 128; nothing is stored in any sequence.
  const std::vector<int32_t> fill = {3, 0, 0, 0};
  for (int i = 0; i < 41; ++i) run.attend(*cache, in, 0, 3, fill.data(), out);
  REQUIRE(cache->length(0) == 126);
  args.new_token_counts = fill.data();
  REQUIRE(mha::cache_attend(*cache, args, run.scratch, nullptr, run.tiled) == Status::kCacheFull);
  const std::vector<int32_t> after = {126, 1, 0, 2};
  REQUIRE(std::vector<int32_t>(cache->lengths(), cache->lengths() + kBatch) == after);

  const std::vector<int32_t> too_long = {5, 2, 0, 2}, negative = {5, 1, -1, 2};
  REQUIRE(cache->truncate_each(too_long.data()) == Status::kCacheBadLength);
  REQUIRE(cache->truncate_each(negative.data()) == Status::kCacheBadLength);
  REQUIRE(std::vector<int32_t>(cache->lengths(), cache->lengths() + kBatch) == after);
  REQUIRE(cache->truncate(127) == Status::kCacheBadLength);
  REQUIRE(cache->truncate(2) == Status::kOk);  // min(lengths[b], 2)
  const std::vector<int32_t> cut = {2, 1, 0, 2};
  REQUIRE(std::vector<int32_t>(cache->lengths(), cache->lengths() + kBatch) == cut);

  std::vector<float> k(64 * 64), v(64 * 64);
  REQUIRE(cache->read(k.data(), v.data(), 0, 1) == Status::kCacheBadLength);  // sequence 2 is empty
  REQUIRE(cache->read(k.data(), v.data(), 0, 0) == Status::kOk);
  std::vector<int32_t> one = {1, 1, 1, 1};
  const Inputs next = step_inputs(c, one, 1, 9);
  run.attend(*cache, next, 0, 1, one.data(), out);
  REQUIRE(cache->read(k.data(), v.data(), 0, 1) == Status::kOk);  // lengths {3, 2, 1, 3}
  REQUIRE(cache->read(k.data(), v.data(), 0, 2) == Status::kCacheBadLength);
  REQUIRE(cache->read(k.data(), v.data(), 1, 0) == Status::kCacheBadLength);
  // Token 0 of sequence 1, head 0, element 0, as the kernels see it.
  REQUIRE(k[size_t(c.kv_heads) * c.dh] == cache->key(1, 0, 0, 0));
}
