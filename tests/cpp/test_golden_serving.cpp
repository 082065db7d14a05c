// The v4 golden vectors (tests/golden/v4: docs/spec.md Part 5, made by tests/golden/generate.py) against
// the core: the 'serving' cases (a shared prefix, reorder, ring caches, the int4 cache) through every
// decode kernel variant, the exact rows and the automatic path, out and lse of every step, lengths,
// stored and the values read back; the 'merge' cases' partial states from every kernel variant, merged
// in float64 as mha.mergeAttention does, against the full call.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "golden.hpp"
#include "golden_call.hpp"
#include "mha/cache/kv_cache.hpp"
#include "mha/decode/decode.hpp"
#include "mha/kernels/kernel.hpp"
#include "test_util.hpp"

using mha::CacheDType;
using mha::Status;
using mha_test::GoldenCall;
using mha_test::GoldenCase;
using mha_test::Json;

namespace {

// The dtype of a case by its name in the dtype table.
bool runs_dtype(const std::string& name, CacheDType& dtype) {
#define MHA_GOLDEN_DTYPE(number, id, text, Codec, version, integer) \
  if (name == text) {                                               \
    dtype = CacheDType::id;                                         \
    return true;                                                    \
  }
  MHA_CACHE_DTYPES(MHA_GOLDEN_DTYPE)
#undef MHA_GOLDEN_DTYPE
  FAIL("golden cache dtype " << name << " is not in the dtype table");
  return false;
}

std::vector<int32_t> ints(const Json& array) {
  std::vector<int32_t> out;
  for (const Json& x : array.array) out.push_back(x.as_int());
  return out;
}

std::vector<std::vector<int32_t>> int_rows(const Json* array) {
  std::vector<std::vector<int32_t>> out;
  if (array != nullptr)
    for (const Json& row : array->array) out.push_back(ints(row));
  return out;
}

// A serving case: its tensors and options (GoldenCall maps window, softcap, ALiBi, sinks and rope) and
// its cache's schedule.
struct Serving {
  const GoldenCase& c;
  GoldenCall g;
  CacheDType dtype = CacheDType::kFloat32;
  int32_t B, S, H, Hkv, Dh, Dv, Lp = 0, capacity;
  bool ring = false;
  int32_t reorder_after = -1;
  std::vector<int32_t> steps, indices;
  std::vector<std::vector<int32_t>> new_tokens, lengths, stored;
  std::vector<float> pq, pk, pv;

  Serving(const GoldenCase& gc, CacheDType d) : c(gc), g(gc), dtype(d) {
    const mha::AttentionShape& s = g.args.shape;
    B = s.batch, S = s.seq_len, H = s.num_heads, Hkv = s.kv_heads(), Dh = s.head_dim(), Dv = s.value_dim();
    const Json& cache = c.entry.at("cache");
    capacity = cache.at("capacity").as_int();
    ring = cache.find("ring") != nullptr && cache.at("ring").boolean;
    steps = ints(cache.at("steps"));
    new_tokens = int_rows(cache.find("newTokens"));
    lengths = int_rows(cache.find("lengths"));
    stored = int_rows(cache.find("stored"));
    if (const Json* reorder = cache.find("reorder")) {
      reorder_after = reorder->at("afterStep").as_int();
      indices = ints(reorder->at("indices"));
    }
    if (const Json* prefix = c.entry.find("prefix")) {
      Lp = prefix->at("length").as_int();
      pq = c.read<float>("prefixQ", int64_t{Lp} * H * Dh);
      pk = c.read<float>("prefixK", int64_t{Lp} * Hkv * Dh);
      pv = c.read<float>("prefixV", int64_t{Lp} * Hkv * Dv);
    }
  }
  mha::KVCacheConfig config(int32_t batch, int32_t cap, bool as_ring) const {
    mha::KVCacheConfig k{batch, Hkv, Dh, cap, dtype, Dv};
    k.ring = as_ring;
    return k;
  }
};

struct Outputs {
  std::vector<float> out, lse, prefix_out, k_read, v_read, prefix_k, prefix_v;
  std::vector<std::vector<int32_t>> lengths, stored;
};

Outputs run(const Serving& s, const mha::DecodeKernel* kernel, mha::CachePath path) {
  mha::DecodeScratch scratch;
  mha::Workspace tiled;
  const int32_t qw = s.H * s.Dh, kw = s.Hkv * s.Dh, vw = s.Hkv * s.Dv, ow = s.H * s.Dv;
  mha::CacheAttendArgs args;
  args.options() = s.g.args.options();
  args.causal = true;
  args.num_heads = s.H;
  args.kernel = kernel;
  args.path = path;
  Outputs r;
  std::unique_ptr<mha::KVCache> prefix, cache;
  if (s.Lp > 0) {
    REQUIRE(mha::KVCache::create(s.config(1, s.Lp, false), prefix) == Status::kOk);
    r.prefix_out.assign(size_t(s.Lp) * ow, -12345.0f);
    std::vector<float> lse(size_t(s.H) * s.Lp);
    args.new_tokens = s.Lp;
    args.q = {s.pq.data(), int64_t{s.Lp} * qw, qw};
    args.k = {s.pk.data(), int64_t{s.Lp} * kw, kw};
    args.v = {s.pv.data(), int64_t{s.Lp} * vw, vw};
    args.out = {r.prefix_out.data(), int64_t{s.Lp} * ow, ow};
    args.lse = lse.data();
    REQUIRE(mha::cache_attend(*prefix, args, scratch, nullptr, tiled) == Status::kOk);
    r.prefix_k.resize(s.pk.size());
    r.prefix_v.resize(s.pv.size());
    REQUIRE(prefix->read(r.prefix_k.data(), r.prefix_v.data(), 0, s.Lp) == Status::kOk);
  }
  REQUIRE(mha::KVCache::create(s.config(s.B, s.capacity, s.ring), cache) == Status::kOk);
  r.out.assign(size_t(s.B) * s.S * ow, -12345.0f);
  r.lse.assign(size_t(s.B) * s.H * s.S, -12345.0f);
  args.prefix = prefix.get();
  int32_t t0 = 0;
  for (size_t step = 0; step < s.steps.size(); ++step) {
    const int32_t n = s.steps[step];
    INFO("step " << step << " at row " << t0 << " of " << n);
    // Dense (B, n, .) outputs, as the TS layer passes them, copied into the stacked (B, S, .) below.
    std::vector<float> lse(size_t(s.B) * s.H * n, -12345.0f), out(size_t(s.B) * n * ow, -12345.0f);
    args.new_tokens = n;
    args.new_token_counts = s.new_tokens.empty() ? nullptr : s.new_tokens[step].data();
    args.q = {s.g.q.data() + int64_t{t0} * qw, int64_t{s.S} * qw, qw};
    args.k = {s.g.k.data() + int64_t{t0} * kw, int64_t{s.S} * kw, kw};
    args.v = {s.g.v.data() + int64_t{t0} * vw, int64_t{s.S} * vw, vw};
    args.out = {out.data(), int64_t{n} * ow, ow};
    args.lse = lse.data();
    REQUIRE(mha::cache_attend(*cache, args, scratch, nullptr, tiled) == Status::kOk);
    for (int32_t b = 0; b < s.B; ++b)
      std::copy_n(&out[size_t(b) * n * ow], size_t(n) * ow, &r.out[(size_t(b) * s.S + t0) * ow]);
    for (int32_t row = 0; row < s.B * s.H; ++row)  // (B, H, n) into columns [t0, t0 + n) of (B, H, S)
      std::copy_n(&lse[size_t(row) * n], n, &r.lse[size_t(row) * s.S + t0]);
    if (int32_t(step) == s.reorder_after) REQUIRE(cache->reorder(s.indices.data()) == Status::kOk);
    r.lengths.emplace_back();
    r.stored.emplace_back();
    for (int32_t b = 0; b < s.B; ++b) {
      r.lengths.back().push_back(cache->length(b));
      r.stored.back().push_back(cache->stored(b));
    }
    t0 += n;
  }
  if (s.c.has("kread")) {
    const int32_t T = cache->min_length();
    r.k_read.resize(size_t(s.B) * T * kw);
    r.v_read.resize(size_t(s.B) * T * vw);
    REQUIRE(cache->read(r.k_read.data(), r.v_read.data(), 0, T) == Status::kOk);
  }
  return r;
}

// max |out - out64| / the golden tolerance, NaN nowhere.
double out_ratio(const std::vector<float>& out, const std::vector<float>& out64, const std::vector<float>& out32) {
  const double tolerance = mha_test::golden_tolerance(out64, out32);
  REQUIRE(out.size() == out64.size());
  double worst = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("element " << i << ": " << out[i] << " vs out64 " << out64[i]);
    REQUIRE(std::isfinite(out[i]));
    worst = std::max(worst, std::fabs(double{out[i]} - double{out64[i]}) / tolerance);
  }
  return worst;
}

void check_serving(const Serving& s, const Outputs& r, double& worst_out, double& worst_lse) {
  const GoldenCase& c = s.c;
  const double ratio = out_ratio(r.out, s.g.out64, s.g.out32);
  REQUIRE(ratio <= 1.0);
  worst_out = std::max(worst_out, ratio);
  mha_test::check_lse(r.lse, c.read<float>("lse64", int64_t{s.B} * s.H * s.S), worst_lse);
  REQUIRE(r.lengths == s.lengths);
  if (s.ring) REQUIRE(r.stored == s.stored);
  if (s.Lp > 0) {
    const int64_t count = int64_t{s.Lp} * s.H * s.Dv;
    REQUIRE(out_ratio(r.prefix_out, c.read<float>("prefixOut64", count), c.read<float>("prefixOut32", count)) <= 1.0);
  }
  auto same_bits = [](const std::vector<float>& got, const std::vector<float>& want) {
    return got.size() == want.size() && std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0;
  };
  if (c.has("kread")) {
    REQUIRE(same_bits(r.k_read, c.read<float>("kread", int64_t(r.k_read.size()))));
    REQUIRE(same_bits(r.v_read, c.read<float>("vread", int64_t(r.v_read.size()))));
  }
  if (c.has("prefixKread")) {
    REQUIRE(same_bits(r.prefix_k, c.read<float>("prefixKread", int64_t(r.prefix_k.size()))));
    REQUIRE(same_bits(r.prefix_v, c.read<float>("prefixVread", int64_t(r.prefix_v.size()))));
  }
}

}  // namespace

TEST_CASE("golden v4: prefix, reorder, ring and int4 caches match PyTorch in every decode kernel and path",
          "[golden][serving]") {
  int ran = 0;
  double worst_out = 0.0, worst_lse = 0.0;
  for (const GoldenCase& c : mha_test::load_golden_set("v4")) {
    if (c.kind != "serving") continue;
    INFO("golden case " << c.name << ": " << c.entry.at("description").string);
    CacheDType dtype = CacheDType::kFloat32;
    REQUIRE(runs_dtype(c.entry.at("cache").at("dtype").string, dtype));
    const Serving s(c, dtype);
    for (const mha::DecodeKernel* kernel : mha::decode_kernel_variants()) {
      INFO("decode kernel " << mha::decode_kernel_name(*kernel));
      check_serving(s, run(s, kernel, mha::CachePath::kDecodeKernel), worst_out, worst_lse);
    }
    INFO("the exact rows, then the automatic path");
    check_serving(s, run(s, nullptr, mha::CachePath::kExactRows), worst_out, worst_lse);
    check_serving(s, run(s, nullptr, mha::CachePath::kAuto), worst_out, worst_lse);
    ++ran;
  }
  WARN("v4 serving cases: " << ran << " run; worst out error / tolerance " << worst_out << ", lse " << worst_lse);
  REQUIRE(ran == 14);
}

TEST_CASE("golden v4: partial states from every kernel variant merge into the full call",
          "[golden][serving][kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  mha::Workspace workspace;
  int merged = 0;
  for (const GoldenCase& c : mha_test::load_golden_set("v4")) {
    if (c.kind != "merge") continue;
    INFO("golden case " << c.name);
    GoldenCall g(c);
    const int32_t B = c.shape.batch, S = c.shape.seq_len, H = c.shape.num_heads, Dv = g.args.shape.value_dim();
    const int32_t parts = c.entry.at("parts").as_int();
    const size_t rows = size_t(B) * H * S;
    std::vector<std::vector<float>> outs, lses;
    std::vector<uint8_t> mask;
    double worst_lse = 0.0;
    for (int32_t p = 0; p < parts; ++p) {
      const std::string id = std::to_string(p);
      mask = c.read<uint8_t>("partMask" + id, g.args.shape.mask_elements());
      g.args.mask = mask.data();
      std::vector<float> out, lse(rows);
      g.args.out = g.out_view(out);
      g.args.lse = lse.data();
      REQUIRE(mha::attention(g.args, workspace, kernel) == Status::kOk);
      const std::vector<float> part64 = c.read<float>("partOut" + id, int64_t(out.size()));
      REQUIRE(out_ratio(out, part64, part64) <= 1.0);
      mha_test::check_lse(lse, c.read<float>("partLse" + id, int64_t(rows)), worst_lse);
      outs.push_back(out);
      lses.push_back(lse);
    }
    // lse = ln sum_p exp(lse_p), out = sum_p exp(lse_p - lse) out_p (docs/spec.md 5.3); a row empty in
    // every part: out 0, lse -inf.
    std::vector<float> out(g.out64.size()), lse(rows);
    for (int32_t b = 0; b < B; ++b)
      for (int32_t h = 0; h < H; ++h)
        for (int32_t i = 0; i < S; ++i) {
          const size_t at = (size_t(b) * H + h) * S + i;
          double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
          for (const auto& part : lses) m = std::max(m, double{part[at]});
          for (const auto& part : lses) sum += std::isinf(part[at]) ? 0.0 : std::exp(double{part[at]} - m);
          const double total = std::isinf(m) ? m : m + std::log(sum);
          lse[at] = static_cast<float>(total);
          for (int32_t e = 0; e < Dv; ++e) {
            const size_t o = (size_t(b) * S + i) * H * Dv + size_t(h) * Dv + e;
            double x = 0.0;
            for (int32_t p = 0; p < parts && !std::isinf(m); ++p)
              if (!std::isinf(lses[p][at])) x += std::exp(double{lses[p][at]} - total) * outs[p][o];
            out[o] = static_cast<float>(x);
          }
        }
    REQUIRE(out_ratio(out, g.out64, g.out32) <= 1.0);
    mha_test::check_lse(lse, c.read<float>("lse64", int64_t(rows)), worst_lse);
    ++merged;
  }
  REQUIRE(merged == 2);
}
