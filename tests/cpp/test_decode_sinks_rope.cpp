// The KV cache with the v0.3 options (docs/spec.md 4.1, 4.4, 4.5): value heads of their own size, sinks
// and rope, through every decode kernel variant, the exact rows and the tiled prefill: a prefill and any
// split into steps equal one stateless causal call with the same options, for float32 and float16
// caches; the v3 golden cache cases that use only these options; and the statuses of bad values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "golden.hpp"
#include "mha/decode/decode.hpp"
#include "mha/core/f16.hpp"
#include "mha/cache/kv_cache.hpp"
#include "mha/reference/reference.hpp"
#include "mha/core/rope.hpp"
#include "test_util.hpp"
#include "strided_call.hpp"

using mha::CacheDType;
using mha::Status;

namespace {

struct SinksRopeCacheCase {
  int32_t batch = 1, heads = 4, kv_heads = 2, dh = 8, dv = 0;  // dv 0 = Dh
  CacheDType dtype = CacheDType::kFloat32;
  std::vector<int32_t> steps;
  std::vector<std::vector<int32_t>> new_tokens;  // per step (B) real rows (docs/spec.md 4.6), or empty
  int32_t window_left = -1;
  std::vector<float> sinks, cos, sin;  // sinks (H), rope tables (P, rotary_dim / 2), or empty
  mha::RotaryTables rope;              // positions, rotary_dim, interleaved; tables() points at cos, sin
  std::vector<float> q, k, v;          // (B, T, H*Dh), (B, T, Hkv*Dh), (B, T, Hkv*Dv)

  int32_t total() const {
    int32_t t = 0;
    for (int32_t n : steps) t += n;
    return t;
  }
  int32_t value_dim() const { return dv > 0 ? dv : dh; }
  int32_t qw() const { return heads * dh; }
  int32_t kw() const { return kv_heads * dh; }
  int32_t vw() const { return kv_heads * value_dim(); }
  int32_t ow() const { return heads * value_dim(); }

  void fill(uint64_t seed) {
    const size_t rows = size_t(batch) * total();
    q = mha_test::random_tensor(rows * qw(), seed);
    k = mha_test::random_tensor(rows * kw(), seed + 1);
    v = mha_test::random_tensor(rows * vw(), seed + 2);
  }
  void set_rope(int32_t rotary_dim, bool interleaved, int32_t positions) {
    mha_test::rope_tables(rotary_dim, positions, 10000.0, cos, sin);
    rope = mha::RotaryTables{nullptr, nullptr, positions, rotary_dim, interleaved};
  }
  // The tables of this object (a copy of the case points at its own vectors).
  mha::RotaryTables tables() const {
    if (cos.empty()) return mha::RotaryTables{};
    mha::RotaryTables r = rope;
    r.cos = cos.data();
    r.sin = sin.data();
    return r;
  }
  mha::AttentionOptions options() const {
    mha::AttentionOptions o;
    o.causal = true;
    o.window_left = window_left;
    o.scale = mha::default_scale(dh);
    o.sinks = sinks.empty() ? nullptr : sinks.data();
    o.rope = tables();
    return o;
  }
};

// The steps through a fresh cache; the outputs stacked along the sequence (B, T, H*Dv).
// k_read, v_read (optional): the cache read back after the last step (B, T, Hkv*Dh), (B, T, Hkv*Dv).
std::vector<float> run_cache(const SinksRopeCacheCase& c, const mha::DecodeKernel* kernel, mha::CachePath path,
                             mha::DecodeScratch* scratch_out = nullptr, std::vector<float>* k_read = nullptr,
                             std::vector<float>* v_read = nullptr) {
  std::unique_ptr<mha::KVCache> cache;
  const int32_t T = c.total();
  REQUIRE(mha::KVCache::create({c.batch, c.kv_heads, c.dh, T, c.dtype, c.dv}, cache) == Status::kOk);
  mha::DecodeScratch own;
  mha::DecodeScratch& scratch = scratch_out != nullptr ? *scratch_out : own;
  mha::Workspace tiled;
  std::vector<float> out(size_t(c.batch) * T * c.ow(), -12345.0f);
  int32_t t0 = 0;
  for (size_t step = 0; step < c.steps.size(); ++step) {
    const int32_t n = c.steps[step];
    mha::CacheAttendArgs args;
    args.new_tokens = n;
    args.new_token_counts = c.new_tokens.empty() ? nullptr : c.new_tokens[step].data();
    args.q = {c.q.data() + int64_t{t0} * c.qw(), int64_t{T} * c.qw(), c.qw()};
    args.k = {c.k.data() + int64_t{t0} * c.kw(), int64_t{T} * c.kw(), c.kw()};
    args.v = {c.v.data() + int64_t{t0} * c.vw(), int64_t{T} * c.vw(), c.vw()};
    args.out = {out.data() + int64_t{t0} * c.ow(), int64_t{T} * c.ow(), c.ow()};
    args.options() = c.options();
    args.num_heads = c.heads;
    args.kernel = kernel;
    args.path = path;
    INFO("step at " << t0 << " of " << n);
    REQUIRE(mha::cache_attend(*cache, args, scratch, nullptr, tiled) == Status::kOk);
    t0 += n;
  }
  if (k_read != nullptr) REQUIRE(cache->read(k_read->data(), v_read->data(), 0, cache->min_length()) == Status::kOk);
  return out;
}

// One stateless causal call over the whole sequence. float16, bfloat16, int8: over the keys as stored
// (rotated in float32, then rounded) and q rotated the same way, without rope; float32: with the rope
// option itself.
std::vector<float> stateless(const SinksRopeCacheCase& c) {
  const int32_t T = c.total();
  std::vector<float> q = c.q, k = c.k, v = c.v, out;
  mha::AttentionArgs a;
  a.shape = mha::AttentionShape{c.batch, T, T, c.qw(), c.heads, c.kv_heads, c.dv};
  a.causal = true;
  a.window_left = c.window_left;
  a.scale = mha::default_scale(c.dh);
  a.sinks = c.sinks.empty() ? nullptr : c.sinks.data();
  a.rope = c.tables();
  if (c.dtype != CacheDType::kFloat32) {
    for (int32_t r = 0; r < c.batch * T; ++r) {
      const int32_t position = r % T;
      for (int32_t h = 0; h < c.heads && a.rope.enabled(); ++h)
        mha::rotate_head(&q[size_t(r) * c.qw() + h * c.dh], 1, a.rope, position);
      for (int32_t g = 0; g < c.kv_heads && a.rope.enabled(); ++g)
        mha::rotate_head(&k[size_t(r) * c.kw() + g * c.dh], 1, a.rope, position);
    }
    mha::round_as_stored(c.dtype, k.data(), k.data(), int64_t{c.batch} * T * c.kv_heads, c.dh);
    mha::round_as_stored(c.dtype, v.data(), v.data(), int64_t{c.batch} * T * c.kv_heads, c.value_dim());
    a.rope = mha::RotaryTables{};
  }
  a.q = mha::dense_view<const float>(q.data(), T, c.qw());
  a.k = mha::dense_view<const float>(k.data(), T, c.kw());
  a.v = mha::dense_view<const float>(v.data(), T, c.vw());
  out.assign(size_t(c.batch) * T * c.ow(), 0.0f);
  a.out = mha::dense_view(out.data(), T, c.ow());
  REQUIRE(mha::reference_attention(a) == Status::kOk);
  return out;
}

std::vector<SinksRopeCacheCase> sinks_rope_cases() {
  std::vector<SinksRopeCacheCase> cases;
  for (CacheDType dtype :
       {CacheDType::kFloat32, CacheDType::kFloat16, CacheDType::kBFloat16, CacheDType::kInt8, CacheDType::kInt4}) {
    SinksRopeCacheCase c;
    c.dtype = dtype;
    c.steps = {20, 1, 3, 1};
    c.set_rope(8, false, 25);  // rotate_half, rotary_dim = Dh
    cases.push_back(c);
    c.dh = 16;
    c.set_rope(6, true, 30);  // interleaved, rotary_dim < Dh
    c.steps = {5, 2, 1, 1};
    cases.push_back(c);
    c = SinksRopeCacheCase{};
    c.dtype = dtype;
    c.heads = 6, c.kv_heads = 3, c.dh = 16, c.dv = 5;
    c.steps = {18, 1, 1, 4};
    c.sinks = {0.5f, -1.0f, 2.0f, 0.0f, 30.0f, -3.0f};  // head 4's sink dominates
    cases.push_back(c);
    c.dv = 24;
    c.batch = 2;
    c.window_left = 3;
    c.set_rope(16, false, 24);
    cases.push_back(c);  // all three, and a window
    c = SinksRopeCacheCase{};
    c.dtype = dtype;
    c.heads = 2, c.kv_heads = 1, c.dh = 32, c.dv = 13;
    c.steps = {3, 600, 1};  // several split-K blocks
    c.sinks = {1.0f, -2.0f};
    c.set_rope(32, true, 604);
    cases.push_back(c);
  }
  return cases;
}

}  // namespace

TEST_CASE(
    "decode, sinks and rope: rope, Dv and sinks through every decode kernel, the exact rows and the tiled prefill",
    "[decode][sinks-rope]") {
  uint64_t seed = 9100;
  for (SinksRopeCacheCase c : sinks_rope_cases()) {
    c.fill(seed++);
    const std::vector<float> ref = stateless(c);
    INFO("Dh " << c.dh << " Dv " << c.value_dim() << " f16 " << (c.dtype == CacheDType::kFloat16) << " rope "
               << !c.cos.empty() << " sinks " << !c.sinks.empty() << " T " << c.total());
    for (const mha::DecodeKernel* kernel : mha::decode_kernel_variants()) {
      INFO("decode kernel " << mha::decode_kernel_name(*kernel));
      mha_test::require_close(ref, run_cache(c, kernel, mha::CachePath::kDecodeKernel));
    }
    mha_test::require_close(ref, run_cache(c, nullptr, mha::CachePath::kExactRows));
    mha::DecodeScratch scratch;
    mha_test::require_close(ref, run_cache(c, nullptr, mha::CachePath::kAuto, &scratch));
    REQUIRE(scratch.counters.tiled_prefills == (c.steps[0] >= 16 ? 1 : 0));
  }
}

TEST_CASE("decode, sinks and rope: a prefill and any split into steps give the same answer", "[decode][sinks-rope]") {
  std::mt19937 rng(44);
  for (SinksRopeCacheCase c : sinks_rope_cases()) {
    const int32_t T = std::min(c.total(), 60);
    for (int split = 0; split < 3; ++split) {
      c.steps.clear();
      for (int32_t left = T; left > 0;) {
        const int32_t n = split == 0 ? left : std::min(left, static_cast<int32_t>(rng() % (split == 1 ? 20 : 3)) + 1);
        c.steps.push_back(n);
        left -= n;
      }
      c.fill(77);
      INFO("split " << split << " Dv " << c.value_dim() << " f16 " << (c.dtype == CacheDType::kFloat16));
      mha_test::require_close(stateless(c), run_cache(c, nullptr, mha::CachePath::kAuto));
    }
  }
}

TEST_CASE("decode, sinks and rope: keys are stored rotated; bad sinks, rope and Dv change nothing",
          "[decode][sinks-rope]") {
  SinksRopeCacheCase c;
  c.dv = 12;
  c.steps = {3};
  c.set_rope(8, false, 4);
  c.fill(5);
  std::unique_ptr<mha::KVCache> cache;
  REQUIRE(mha::KVCache::create({1, 2, 8, 4, CacheDType::kFloat32, 12}, cache) == Status::kOk);
  REQUIRE(mha::kv_cache_bytes({1, 2, 8, 4, CacheDType::kFloat32, 12}) == 4.0 * 2 * (32 * 8 + 4 * 16));
  mha::DecodeScratch scratch;
  mha::Workspace tiled;
  std::vector<float> out(size_t(3) * c.ow(), 0.0f);
  mha::CacheAttendArgs args;
  args.new_tokens = 3;
  args.q = mha::dense_view<const float>(c.q.data(), 3, c.qw());
  args.k = mha::dense_view<const float>(c.k.data(), 3, c.kw());
  args.v = mha::dense_view<const float>(c.v.data(), 3, c.vw());
  args.out = mha::dense_view(out.data(), 3, c.ow());
  args.options() = c.options();
  args.num_heads = c.heads;
  mha::CacheAttendArgs bad = args;
  const float nan_sinks[4] = {0.0f, NAN, 0.0f, 0.0f};
  bad.sinks = nan_sinks;
  CHECK(mha::cache_attend(*cache, bad, scratch, nullptr, tiled) == Status::kBadSinks);
  bad = args;
  bad.rope.rotary_dim = 10;
  CHECK(mha::cache_attend(*cache, bad, scratch, nullptr, tiled) == Status::kBadRotaryDim);
  bad.rope.rotary_dim = 3;
  CHECK(mha::cache_attend(*cache, bad, scratch, nullptr, tiled) == Status::kBadRotaryDim);
  bad = args;
  bad.rope.positions = 2;
  CHECK(mha::cache_attend(*cache, bad, scratch, nullptr, tiled) == Status::kRopePosition);
  CHECK(cache->max_length() == 0);
  REQUIRE(mha::cache_attend(*cache, args, scratch, nullptr, tiled) == Status::kOk);
  args.new_tokens = 2;  // positions 3 and 4: the tables hold 4 rows (checked before the capacity)
  CHECK(mha::cache_attend(*cache, args, scratch, nullptr, tiled) == Status::kRopePosition);
  CHECK(cache->max_length() == 3);
  std::vector<float> k(size_t(3) * c.kw()), v(size_t(3) * c.vw());
  cache->read(k.data(), v.data(), 0, cache->min_length());
  std::vector<float> rotated = c.k;
  for (int32_t j = 0; j < 3; ++j)
    for (int32_t g = 0; g < 2; ++g) mha::rotate_head(&rotated[size_t(j) * c.kw() + g * 8], 1, c.tables(), j);
  CHECK(mha_test::bit_equal(k, std::vector<float>(rotated.begin(), rotated.begin() + 3 * c.kw())));
  CHECK(mha_test::bit_equal(v, std::vector<float>(c.v.begin(), c.v.begin() + 3 * c.vw())));
  std::unique_ptr<mha::KVCache> none;
  CHECK(mha::KVCache::create({1, 2, 8, 4, CacheDType::kFloat32, -1}, none) == Status::kBadVHeadDim);
}

TEST_CASE("decode, sinks and rope: golden cache cases with rope, vHeadDim, sinks, float16 storage and ragged lengths",
          "[decode][sinks-rope][golden]") {
  int ran = 0;
  for (const mha_test::GoldenCase& g : mha_test::load_golden_set("v3")) {
    if (g.kind != "cache") continue;
    const mha_test::Json& cache = g.entry.at("cache");
    const std::string dtype = cache.at("dtype").string;
    INFO("golden case " << g.name);
    SinksRopeCacheCase c;
    c.batch = g.shape.batch;
    c.heads = g.shape.num_heads;
    c.kv_heads = g.num_kv_heads;
    c.dh = g.entry.at("headDim").as_int();
    c.dtype = dtype == "float16"    ? CacheDType::kFloat16
              : dtype == "bfloat16" ? CacheDType::kBFloat16
              : dtype == "int8"     ? CacheDType::kInt8
                                    : CacheDType::kFloat32;
    for (const mha_test::Json& n : cache.at("steps").array) c.steps.push_back(n.as_int());
    if (const mha_test::Json* counts = cache.find("newTokens")) {
      for (const mha_test::Json& step : counts->array) {
        c.new_tokens.emplace_back();
        for (const mha_test::Json& x : step.array) c.new_tokens.back().push_back(x.as_int());
      }
    }
    const mha_test::Json& options = g.entry.at("options");
    bool f16_inputs = false;
    for (const auto& [name, value] : options.object) {
      if (name == "vHeadDim") {
        c.dv = value.as_int();
      } else if (name == "sinks") {
        for (const mha_test::Json& x : value.array) c.sinks.push_back(static_cast<float>(x.number));
      } else if (name == "window") {
        c.window_left = value.array.at(0).as_int();
        REQUIRE(value.array.at(1).as_int() == 0);
      } else if (name == "dtype") {
        f16_inputs = value.string == "float16";
      } else if (name == "rope") {
        const int32_t rotary = value.at("rotaryDim").as_int(), positions = value.at("positions").as_int();
        c.cos = g.read<float>(value.at("cos").string, int64_t{positions} * (rotary / 2));
        c.sin = g.read<float>(value.at("sin").string, int64_t{positions} * (rotary / 2));
        c.rope = mha::RotaryTables{nullptr, nullptr, positions, rotary, value.at("interleaved").boolean};
      } else {
        REQUIRE(name == "numKvHeads");
      }
    }
    const int64_t rows = int64_t{c.batch} * c.total();
    auto tensor = [&](const char* role, int64_t count) {
      if (!f16_inputs) return g.read<float>(role, count);
      const std::vector<uint16_t> halves = g.read<uint16_t>(role, count);  // widened exactly (the TS layer's job)
      std::vector<float> values(halves.size());
      for (size_t i = 0; i < halves.size(); ++i) values[i] = mha::f16::decode(halves[i]);
      return values;
    };
    c.q = tensor("q", rows * c.qw());
    c.k = tensor("k", rows * c.kw());
    c.v = tensor("v", rows * c.vw());
    const auto out64 = g.read<float>(f16_inputs ? "out64f32" : "out64", rows * c.ow());
    const auto out32 = g.read<float>("out32", rows * c.ow());
    const double tolerance = mha_test::golden_tolerance(out64, out32);
    auto worst_of = [&](const std::vector<float>& out) {
      double worst = 0.0;
      for (size_t e = 0; e < out.size(); ++e) {
        REQUIRE(std::isnan(out[e]) == std::isnan(out64[e]));
        if (!std::isnan(out64[e])) worst = std::max(worst, std::fabs(double(out[e]) - double(out64[e])));
      }
      return worst / tolerance;
    };
    for (const mha::DecodeKernel* kernel : mha::decode_kernel_variants()) {
      const double ratio = worst_of(run_cache(c, kernel, mha::CachePath::kDecodeKernel));
      WARN(g.name << " decode " << mha::decode_kernel_name(*kernel) << ": worst error / tolerance " << ratio);
      REQUIRE(ratio <= 1.0);
    }
    const double tiled = worst_of(run_cache(c, nullptr, mha::CachePath::kAuto));
    REQUIRE(tiled <= 1.0);
    if (g.has("kread")) {  // bfloat16, int8: the stored values read back exactly as docs/spec.md 4.8 says
      std::vector<float> k_read(size_t(rows * c.kw())), v_read(size_t(rows * c.vw()));
      run_cache(c, nullptr, mha::CachePath::kAuto, nullptr, &k_read, &v_read);
      const auto k_want = g.read<float>("kread", rows * c.kw()), v_want = g.read<float>("vread", rows * c.vw());
      REQUIRE(std::memcmp(k_read.data(), k_want.data(), k_want.size() * sizeof(float)) == 0);
      REQUIRE(std::memcmp(v_read.data(), v_want.data(), v_want.size() * sizeof(float)) == 0);
    }
    ++ran;
  }
  REQUIRE(ran == 8);
}
