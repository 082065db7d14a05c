// Attention through the KV cache (src/mha/decode.hpp): every decode kernel variant against the
// double-precision reference (src/mha/reference.hpp) on the equivalent multi-head problem, which the
// tests build from the cache case: KV heads repeated for GQA (a test construction, not a second
// reference), K/V rounded to binary16 for f16 caches, the visibility of every query (its position, the
// end of its step, causal, window) as the reference's mask, softcap and ALiBi as the reference's own
// options (query i of the sequence sits at position i). Also: splits into steps, threads, waves,
// non-finite inputs, empty rows, errors, heap use over 20,000 steps, and the golden-v2 cache cases.
// Longer than 500 lines: one file per subject, as the other suites.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "golden.hpp"
#include "heap_usage.hpp"
#include "mha/cache_codecs.hpp"
#include "mha/decode.hpp"
#include "mha/decode_path.hpp"
#include "mha/f16.hpp"
#include "mha/kernel.hpp"
#include "mha/kv_cache.hpp"
#include "mha/parallel.hpp"
#include "mha/reference.hpp"
#include "test_util.hpp"

static_assert(mha::test_seam::kEnabled, "the test cores count the decode driver's paths (src/mha/test_seam.hpp)");

namespace {

using mha::CacheDType;
using mha::Status;

// The suite's one tolerance check, bit comparison and special values (test_util.hpp).
using mha_test::bit_equal;
using mha_test::kInf;
using mha_test::kNaN;
using mha_test::require_close;

struct CacheCase {
  int32_t batch = 1, heads = 4, kv_heads = 4, head_dim = 8;
  CacheDType dtype = CacheDType::kFloat32;
  std::vector<int32_t> steps;  // new tokens per attend call
  int32_t capacity = 0;        // 0: exactly the total
  bool causal = true;
  int32_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  std::vector<float> slopes;  // ALiBi, or empty
  bool empty_rows_zero = false;

  int32_t total() const { return std::accumulate(steps.begin(), steps.end(), 0); }
  int32_t q_width() const { return heads * head_dim; }
  int32_t kv_width() const { return kv_heads * head_dim; }
  mha::KVCacheConfig config() const { return {batch, kv_heads, head_dim, capacity > 0 ? capacity : total(), dtype}; }
  mha::CacheAttendOptions options() const {
    mha::CacheAttendOptions o;
    o.num_heads = heads;
    o.causal = causal;
    o.window_left = window_left;
    o.window_right = window_right;
    o.softcap = softcap;
    o.alibi_slopes = slopes.empty() ? nullptr : slopes.data();
    o.scale = mha::default_scale(head_dim);
    o.empty_rows_zero = empty_rows_zero;
    return o;
  }
};

std::string describe(const CacheCase& c) {
  std::string steps;
  for (int32_t n : c.steps) steps += std::to_string(n) + " ";
  return "B " + std::to_string(c.batch) + " H " + std::to_string(c.heads) + " Hkv " + std::to_string(c.kv_heads) + " Dh " +
         std::to_string(c.head_dim) + (c.dtype == CacheDType::kFloat16 ? " f16" : " f32") + " steps " + steps +
         (c.causal ? "causal" : "not causal") + " window " + std::to_string(c.window_left) + "," +
         std::to_string(c.window_right) + " softcap " + std::to_string(c.softcap) + (c.slopes.empty() ? "" : " alibi");
}

// The whole sequence: q (B, T, H*Dh), k and v (B, T, Hkv*Dh).
struct CacheData {
  std::vector<float> q, k, v;
};

CacheData case_data(const CacheCase& c, uint32_t seed, float input_scale = 1.0f) {
  const size_t rows = size_t(c.batch) * c.total();
  return CacheData{mha_test::random_tensor(rows * c.q_width(), seed, input_scale),
                   mha_test::random_tensor(rows * c.kv_width(), seed + 1, input_scale),
                   mha_test::random_tensor(rows * c.kv_width(), seed + 2, input_scale)};
}

struct Runner {
  const mha::DecodeKernel* kernel = nullptr;
  mha::ParallelAttention* parallel = nullptr;
  mha::CachePath path = mha::CachePath::kAuto;
  mha::DecodeScratch* scratch = nullptr;  // nullptr: a fresh one
  bool out_is_q = false;                  // write the result over (a copy of) q
};

// The case's steps through one fresh cache; the outputs stacked along the sequence (B, T, H*Dh).
std::vector<float> run_cache(const CacheCase& c, const CacheData& data, const Runner& run = Runner{}) {
  std::unique_ptr<mha::KVCache> cache;
  REQUIRE(mha::KVCache::create(c.config(), cache) == Status::kOk);
  mha::DecodeScratch own;
  mha::DecodeScratch& scratch = run.scratch != nullptr ? *run.scratch : own;
  mha::Workspace tiled;
  const int32_t T = c.total(), D = c.q_width(), Dkv = c.kv_width();
  std::vector<float> q = data.q;
  std::vector<float> out(q.size(), -12345.0f);
  float* out_data = run.out_is_q ? q.data() : out.data();
  int32_t t0 = 0;
  for (int32_t n : c.steps) {
    mha::CacheAttendArgs args;
    args.new_tokens = n;
    args.q = {q.data() + int64_t{t0} * D, int64_t{T} * D, D};
    args.k = {data.k.data() + int64_t{t0} * Dkv, int64_t{T} * Dkv, Dkv};
    args.v = {data.v.data() + int64_t{t0} * Dkv, int64_t{T} * Dkv, Dkv};
    args.out = {out_data + int64_t{t0} * D, int64_t{T} * D, D};
    args.options = c.options();
    args.kernel = run.kernel;
    args.path = run.path;
    INFO("step at " << t0 << " of " << n << " tokens");
    REQUIRE(mha::cache_attend(*cache, args, scratch, run.parallel, tiled) == Status::kOk);
    REQUIRE(cache->max_length() == t0 + n);
    t0 += n;
  }
  if (run.out_is_q) out = q;
  return out;
}

// The reference's answer for the case, on the equivalent multi-head problem (see the top).
std::vector<float> reference_for(const CacheCase& c, const CacheData& data) {
  const int32_t T = c.total(), H = c.heads, G = c.heads / c.kv_heads, Dh = c.head_dim;
  const size_t rows = size_t(c.batch) * T;
  std::vector<float> q(rows * H * Dh, 0.0f), k(q.size(), 0.0f), v(q.size(), 0.0f), out(q.size());
  std::vector<uint8_t> mask(size_t(c.batch) * T * T);
  std::vector<int32_t> step_end(static_cast<size_t>(T));
  for (int32_t i = 0, t0 = 0; i < static_cast<int32_t>(c.steps.size()); t0 += c.steps[size_t(i)], ++i)
    for (int32_t t = t0; t < t0 + c.steps[size_t(i)]; ++t) step_end[size_t(t)] = t0 + c.steps[size_t(i)];
  auto f16_round = [&c](float x) {
    if (c.dtype == CacheDType::kFloat16) return mha::f16::decode(mha::f16::encode(x));
    return c.dtype == CacheDType::kBFloat16 ? mha::bf16::decode(mha::bf16::encode(x)) : x;
  };
  // int8 rounds each token's KV head row in blocks of 32 (cache_codecs.hpp).
  std::vector<float> k_stored = data.k, v_stored = data.v;
  if (c.dtype == CacheDType::kInt8) {
    for (size_t at = 0; at < k_stored.size(); at += size_t(Dh)) {
      mha::q8::round_row(k_stored.data() + at, k_stored.data() + at, Dh);
      mha::q8::round_row(v_stored.data() + at, v_stored.data() + at, Dh);
    }
  }
  for (size_t r = 0; r < rows; ++r) {
    for (int32_t h = 0; h < H; ++h) {
      const size_t dst = (r * H + h) * Dh;
      const size_t kv_src = r * c.kv_width() + size_t(h / G) * Dh;
      for (int32_t d = 0; d < Dh; ++d) {
        q[dst + d] = data.q[r * c.q_width() + size_t(h) * Dh + d];
        k[dst + d] = f16_round(k_stored[kv_src + d]);
        v[dst + d] = f16_round(v_stored[kv_src + d]);
      }
    }
  }
  for (int32_t b = 0; b < c.batch; ++b)
    for (int32_t i = 0; i < T; ++i) {
      const mha::KeySpan keys = mha::visible_keys(i, step_end[size_t(i)], c.causal, c.window_left, c.window_right);
      for (int32_t j = 0; j < T; ++j) mask[(size_t(b) * T + i) * T + j] = (j >= keys.first && j <= keys.last) ? 1 : 0;
    }
  mha::AttentionArgs args;
  args.shape = mha::AttentionShape{c.batch, T, T, H * Dh, H};
  args.q = mha::dense_view<const float>(q.data(), T, H * Dh);
  args.k = mha::dense_view<const float>(k.data(), T, H * Dh);
  args.v = mha::dense_view<const float>(v.data(), T, H * Dh);
  args.out = mha::dense_view(out.data(), T, H * Dh);
  args.mask = mask.data();
  args.scale = mha::default_scale(Dh);
  args.softcap = c.softcap;
  args.alibi_slopes = c.slopes.empty() ? nullptr : c.slopes.data();  // query i is at position i: query_offset 0
  REQUIRE(mha::reference_attention(args) == Status::kOk);
  return out;
}

std::vector<const mha::DecodeKernel*> kernels() {
  // Every decode kernel variant compiled into this build (kernel_table.cpp), as the tiled ones are tested.
  return std::vector<const mha::DecodeKernel*>(mha::decode_kernel_variants().begin(), mha::decode_kernel_variants().end());
}

// Checks every kernel variant against the reference on one case.
void require_kernels_match_reference(const CacheCase& c, const CacheData& data, float tol = 1e-5f) {
  INFO(describe(c));
  const auto ref = reference_for(c, data);
  for (const mha::DecodeKernel* kernel : kernels()) {
    INFO("kernel " << mha::decode_kernel_name(*kernel));
    Runner run;
    run.kernel = kernel;
    run.path = mha::CachePath::kDecodeKernel;
    require_close(ref, run_cache(c, data, run), tol);
  }
}

CacheCase make_case(int32_t batch, int32_t heads, int32_t kv_heads, int32_t head_dim, std::vector<int32_t> steps,
                    CacheDType dtype = CacheDType::kFloat32) {
  CacheCase c;
  c.batch = batch;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.steps = std::move(steps);
  c.dtype = dtype;
  return c;
}

}  // namespace

TEST_CASE("decode: every kernel equals the reference for MHA, GQA and MQA, every dtype, many head dims", "[decode]") {
  const std::vector<CacheCase> shapes = {
      make_case(1, 4, 4, 8, {9, 1, 1, 1}),
      make_case(2, 4, 2, 16, {6, 1, 1, 3, 1}),
      make_case(1, 8, 1, 64, {600, 1, 1, 2}),     // MQA, past a 512-key block
      make_case(2, 6, 3, 5, {33, 1, 7, 1}),       // Dh not a multiple of 4
      make_case(1, 32, 1, 8, {40, 3, 1}),         // 32 heads share one KV head: 96 rows, 3 row blocks
      make_case(3, 2, 1, 1, {1, 1, 1, 70, 1}),    // Dh = 1, a one-token prefill
      make_case(1, 3, 3, 40, {1040, 1, 8}),       // three key blocks
      make_case(2, 12, 4, 24, {17, 2, 5, 1, 1}),  // G = 3
      make_case(1, 2, 2, 64, {513, 1, 2}),        // MHA Dh = 64 rows past a block, odd tiles (f32: 2 keys a step)
      make_case(1, 4, 2, 136, {300, 1, 2}),       // Dh8 > 128: 256-key blocks, past one
  };
  uint32_t seed = 100;
  for (CacheCase c : shapes) {
    for (CacheDType dtype : {CacheDType::kFloat32, CacheDType::kFloat16, CacheDType::kBFloat16, CacheDType::kInt8}) {
      c.dtype = dtype;
      require_kernels_match_reference(c, case_data(c, seed += 10));
    }
  }
}

TEST_CASE("decode: a float16 cache with subnormal halves decodes as the reference through every kernel", "[decode]") {
  // One row per KV head (the even/odd loader) and 2, 4 and 8 rows (the staged ones), over 10 % of K and V
  // replaced by values whose halves are subnormal (|x| < 2^-14), of both signs, and some zeros of both signs.
  for (const CacheCase& shape : {make_case(1, 4, 4, 64, {600, 1, 1}, CacheDType::kFloat16),
                                 make_case(1, 8, 4, 32, {300, 1, 2}, CacheDType::kFloat16),
                                 make_case(1, 16, 4, 16, {100, 1}, CacheDType::kFloat16),
                                 make_case(1, 16, 2, 24, {90, 1}, CacheDType::kFloat16)}) {
    CacheData data = case_data(shape, 900);
    uint32_t state = 12345;
    auto next = [&state] { return state = state * 1664525u + 1013904223u; };
    for (std::vector<float>* x : {&data.k, &data.v}) {
      for (float& e : *x) {
        const uint32_t r = next();
        if (r % 10 != 0) continue;
        const float sign = (r >> 8) & 1 ? -1.0f : 1.0f;
        e = (r >> 9) % 64 == 0 ? sign * 0.0f : sign * std::ldexp(float(1 + (r >> 12) % 1023), -24);
      }
    }
    require_kernels_match_reference(shape, data);
  }
}

TEST_CASE("decode: queries that are not causal see every key of their step", "[decode]") {
  CacheCase c = make_case(2, 4, 2, 16, {12, 1, 4, 1});
  c.causal = false;
  require_kernels_match_reference(c, case_data(c, 200));
  c.window_left = 3;
  c.window_right = 2;  // a window that reaches past the query
  require_kernels_match_reference(c, case_data(c, 210));
}

TEST_CASE("decode: a sliding window reads only the last W keys", "[decode]") {
  // Keys [0, 400) hold NaN. Prefill rows that see them are NaN (exact path); the decode steps at
  // positions >= 700 with a window of 100 keys start reading at panel 576 at the earliest, so they must
  // be finite, match the reference and never take the exact path.
  for (CacheDType dtype : {CacheDType::kFloat32, CacheDType::kFloat16}) {
    CacheCase c = make_case(1, 4, 2, 16, {700, 1, 1, 1, 4}, dtype);
    c.window_left = 99;
    c.window_right = 0;
    CacheData data = case_data(c, 300);
    for (int32_t j = 0; j < 400; ++j)
      for (int32_t e = 0; e < c.kv_width(); ++e) {
        data.k[size_t(j) * c.kv_width() + e] = kNaN;
        data.v[size_t(j) * c.kv_width() + e] = kNaN;
      }
    const auto ref = reference_for(c, data);
    for (const mha::DecodeKernel* kernel : kernels()) {
      INFO("kernel " << mha::decode_kernel_name(*kernel) << (dtype == CacheDType::kFloat16 ? " f16" : " f32"));
      mha::DecodeScratch scratch;
      Runner run;
      run.kernel = kernel;
      run.scratch = &scratch;
      run.path = mha::CachePath::kDecodeKernel;  // the prefill too: it must take the exact path
      const auto out = run_cache(c, data, run);
      require_close(ref, out);
      const int64_t prefill_exact = scratch.counters.exact_rows.load();
      REQUIRE(prefill_exact > 0);  // the prefill did see the NaN keys
      // Rerun only the decode steps on the same cache contents: none of their rows may fall back.
      scratch.counters.exact_rows = 0;
      std::unique_ptr<mha::KVCache> cache;
      REQUIRE(mha::KVCache::create(c.config(), cache) == Status::kOk);
      mha::Workspace tiled;
      for (int32_t t0 = 0, i = 0; i < static_cast<int32_t>(c.steps.size()); t0 += c.steps[size_t(i)], ++i) {
        const int32_t n = c.steps[size_t(i)], D = c.q_width(), Dkv = c.kv_width();
        std::vector<float> step_out(size_t(n) * D);
        mha::CacheAttendArgs args;
        args.new_tokens = n;
        args.q = {data.q.data() + size_t(t0) * D, int64_t{n} * D, D};
        args.k = {data.k.data() + size_t(t0) * Dkv, int64_t{n} * Dkv, Dkv};
        args.v = {data.v.data() + size_t(t0) * Dkv, int64_t{n} * Dkv, Dkv};
        args.out = {step_out.data(), int64_t{n} * D, D};
        args.options = c.options();
        args.kernel = kernel;
        args.path = run.path;
        const int64_t before = scratch.counters.exact_rows.load();
        REQUIRE(mha::cache_attend(*cache, args, scratch, nullptr, tiled) == Status::kOk);
        if (t0 >= 700) {
          REQUIRE(scratch.counters.exact_rows.load() == before);
          for (float x : step_out) REQUIRE(std::isfinite(x));
        }
      }
      // Without the window the same steps see the NaN keys: the check above can fail.
      c.window_left = -1;
      run_cache(c, data, run);
      REQUIRE(scratch.counters.exact_rows.load() > prefill_exact);
      c.window_left = 99;
    }
  }
}

TEST_CASE("decode: ALiBi, windows and softcap against the reference", "[decode]") {
  CacheCase c = make_case(2, 4, 2, 16, {20, 1, 2, 1});
  c.slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  for (CacheDType dtype : {CacheDType::kFloat32, CacheDType::kFloat16}) {
    c.dtype = dtype;
    require_kernels_match_reference(c, case_data(c, 400));
  }
  c.window_left = 5;
  c.window_right = 0;
  require_kernels_match_reference(c, case_data(c, 410));
  c = make_case(1, 8, 2, 32, {290, 1, 1});
  c.slopes = {0.5f, 0.3f, 0.2f, 0.1f, 0.05f, 0.02f, 0.01f, 0.0f};
  require_kernels_match_reference(c, case_data(c, 420));

  // softcap (Gemma 2): the decode kernels' vectorized tanh (simd128) and std::tanh (scalar) against the
  // reference, with ALiBi and large logits, so that the cap matters.
  c = make_case(2, 6, 3, 16, {30, 1, 1, 4, 290}, CacheDType::kFloat16);
  c.softcap = 2.0f;
  c.slopes = {0.5f, 0.25f, 0.125f, 0.1f, 0.05f, 0.0f};
  const CacheData data = case_data(c, 430, 3.0f);
  for (CacheDType dtype : {CacheDType::kFloat32, CacheDType::kFloat16}) {
    c.dtype = dtype;
    require_kernels_match_reference(c, data);
  }
  c.softcap = 0.3f;  // most scores far out on the flat part of tanh
  require_kernels_match_reference(c, data);
  c.softcap = 1e6f;  // a cap far above every score changes nothing beyond rounding
  const auto capped = run_cache(c, data);
  c.softcap = 0.0f;
  require_close(run_cache(c, data), capped);
}

TEST_CASE("decode: the exact path gives the reference's bits on plain options", "[decode]") {
  CacheCase c = make_case(2, 6, 2, 12, {9, 1, 3, 1}, CacheDType::kFloat16);
  c.window_left = 4;
  const CacheData data = case_data(c, 500);
  Runner exact;
  exact.path = mha::CachePath::kExactRows;
  REQUIRE(bit_equal(run_cache(c, data, exact), reference_for(c, data)));
}

TEST_CASE("decode: a prefill and any split into steps equal one causal call; tiled prefill and out = q", "[decode]") {
  std::mt19937 rng(600);
  const std::vector<CacheCase> shapes = {make_case(1, 4, 4, 16, {}), make_case(2, 8, 2, 32, {}),
                                         make_case(1, 2, 2, 64, {}, CacheDType::kFloat16)};
  for (CacheCase c : shapes) {
    const int32_t T = 90;
    for (int split = 0; split < 4; ++split) {
      c.steps.clear();
      for (int32_t left = T; left > 0;) {
        const int32_t n = split == 0 ? left : std::min(left, static_cast<int32_t>(rng() % (split == 1 ? 40 : 5)) + 1);
        c.steps.push_back(n);
        left -= n;
      }
      const CacheData data = case_data(CacheCase(make_case(c.batch, c.heads, c.kv_heads, c.head_dim, {T})), 610);
      const auto ref = reference_for(c, data);
      INFO(describe(c));
      require_close(ref, run_cache(c, data));  // kAuto: the first step takes the tiled kernel where it applies
      Runner in_place;
      in_place.out_is_q = true;
      require_close(ref, run_cache(c, data, in_place));
    }
  }
}

TEST_CASE("decode: a prefill into an empty cache takes the tiled kernel with GQA, every option and f16", "[decode]") {
  std::vector<CacheCase> cases;
  for (CacheDType dtype : {CacheDType::kFloat32, CacheDType::kFloat16}) {
    cases.push_back(make_case(2, 8, 2, 32, {70, 1, 3}, dtype));  // GQA
    cases.push_back(make_case(1, 6, 1, 16, {40}, dtype));       // MQA
    CacheCase c = make_case(1, 4, 2, 24, {50, 2}, dtype);
    c.window_left = 7;
    c.window_right = 0;
    cases.push_back(c);
    c.window_left = 3;  // not causal: a window on both sides
    c.window_right = 5;
    c.causal = false;
    cases.push_back(c);
    c = make_case(2, 4, 4, 16, {33, 1}, dtype);
    c.slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
    c.empty_rows_zero = true;
    cases.push_back(c);
  }
  for (const CacheCase& c : cases) {
    INFO(describe(c));
    const CacheData data = case_data(c, 700);
    mha::DecodeScratch scratch;
    Runner run;
    run.scratch = &scratch;
    require_close(reference_for(c, data), run_cache(c, data, run));
    REQUIRE(scratch.counters.tiled_prefills == 1);
  }
  for (CacheDType dtype : {CacheDType::kFloat32, CacheDType::kFloat16}) {  // softcap
    CacheCase c = make_case(1, 6, 3, 16, {48, 1}, dtype);
    c.softcap = 2.0f;
    const CacheData data = case_data(c, 710, 3.0f);
    INFO(describe(c));
    mha::DecodeScratch scratch;
    Runner run;
    run.scratch = &scratch;
    require_close(reference_for(c, data), run_cache(c, data, run));
    REQUIRE(scratch.counters.tiled_prefills == 1);
  }
  // A prefill into a non-empty cache and a short one stay on the decode kernel.
  const CacheCase c = make_case(1, 4, 2, 16, {8, 40});
  mha::DecodeScratch scratch;
  Runner run;
  run.scratch = &scratch;
  const CacheData data = case_data(c, 720);
  require_close(reference_for(c, data), run_cache(c, data, run));
  REQUIRE(scratch.counters.tiled_prefills == 0);
}

#ifndef __EMSCRIPTEN__  // the wasm test binary is single-threaded (see test_parallel.cpp)
TEST_CASE("decode: bit-identical for 1, 2 and 3 threads, with the parallel split engaged", "[decode][parallel]") {
  const std::vector<CacheCase> shapes = {
      make_case(1, 16, 1, 64, {1500, 1, 1, 2}),  // MQA: the key blocks are the only parallelism
      make_case(1, 8, 2, 64, {1200, 1, 3}, CacheDType::kFloat16),
      make_case(4, 16, 4, 32, {300, 1, 1}),
      make_case(1, 8, 8, 64, {600, 1}),  // tiled prefill, then decode
  };
  uint32_t seed = 700;
  for (const CacheCase& c : shapes) {
    INFO(describe(c));
    const CacheData data = case_data(c, seed += 10);
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      mha::ParallelAttention parallel(threads);
      REQUIRE(parallel.threads() == threads);
      Runner run;
      run.parallel = &parallel;
      const auto out = run_cache(c, data, run);
      if (first.empty()) {
        first = out;
        require_close(reference_for(c, data), out);
      } else {
        REQUIRE(bit_equal(first, out));
      }
    }
  }
}
#endif

TEST_CASE("decode: waves of row blocks give the same bits as one wave", "[decode]") {
  CacheCase c = make_case(2, 4, 2, 16, {600, 40, 1});
  const CacheData data = case_data(c, 800);
  Runner one_wave;
  one_wave.path = mha::CachePath::kDecodeKernel;
  const auto expected = run_cache(c, data, one_wave);
  mha::DecodeScratch small;
  small.max_partial_floats = 5000;  // a few row blocks per wave
  Runner waves = one_wave;
  waves.scratch = &small;
  REQUIRE(bit_equal(expected, run_cache(c, data, waves)));
  require_close(reference_for(c, data), expected);
}

TEST_CASE("decode: non-finite inputs and float32 overflow get the reference's answer", "[decode]") {
  for (CacheDType dtype : {CacheDType::kFloat32, CacheDType::kFloat16}) {
    CacheCase c = make_case(1, 4, 2, 8, {12, 1, 1, 1}, dtype);
    CacheData data = case_data(c, 900);
    const int32_t D = c.q_width(), Dkv = c.kv_width();
    data.q[size_t(3) * D + 1] = kNaN;               // a NaN query element: its row of head 0 is NaN
    data.k[size_t(5) * Dkv + Dkv - 1] = kInf;       // an infinite key of KV head 1 (heads 2, 3)
    data.v[size_t(10) * Dkv + 2] = kNaN;            // V of key 10, hidden from queries < 10 of its step
    data.q[size_t(13) * D + 8] = 1e20f;             // q . k past float32 (1e20 * 1e20 and more): the double
    data.k[size_t(4) * Dkv] = 3e19f;                // reference stays finite (f16: k overflows to inf)
    data.q[size_t(13) * D] = 3e19f;
    require_kernels_match_reference(c, data);
  }
}

TEST_CASE("decode: empty rows are NaN or zero (emptyRows); a NaN score keeps its row NaN", "[decode]") {
  // Dh = 1, q = +inf and every key negative: every score is -inf, no key is visible in effect.
  CacheCase c = make_case(1, 2, 1, 1, {3, 1});
  CacheData data = case_data(c, 1000);
  for (float& x : data.q) x = kInf;
  for (float& x : data.k) x = -1.0f - std::fabs(x);
  data.q[1] = 1.0f;  // head 1 of query 0 is an ordinary row
  for (const mha::DecodeKernel* kernel : kernels()) {
    Runner run;
    run.kernel = kernel;
    c.empty_rows_zero = false;
    const auto nan_rows = run_cache(c, data, run);
    require_close(reference_for(c, data), nan_rows);  // the reference (PyTorch <= 2.4) gives NaN
    c.empty_rows_zero = true;
    const auto zero_rows = run_cache(c, data, run);
    for (size_t e = 0; e < zero_rows.size(); ++e) REQUIRE(zero_rows[e] == (e == 1 ? nan_rows[1] : 0.0f));
    CacheData with_nan = data;
    with_nan.k[2] = kNaN;  // query 2 and later see a NaN score: NaN whatever emptyRows says
    const auto poisoned = run_cache(c, with_nan, run);
    REQUIRE(poisoned[0] == 0.0f);
    for (size_t e = 4; e < poisoned.size(); ++e) REQUIRE(std::isnan(poisoned[e]));
  }
}

TEST_CASE("decode: bad calls get a status and change nothing", "[decode]") {
  const CacheCase c = make_case(1, 4, 2, 8, {5, 1}, CacheDType::kFloat16);
  std::unique_ptr<mha::KVCache> cache;
  mha::KVCacheConfig config = c.config();
  config.capacity = 8;
  REQUIRE(mha::KVCache::create(config, cache) == Status::kOk);
  const CacheData data = case_data(make_case(1, 4, 2, 8, {10}), 1100);
  mha::DecodeScratch scratch;
  mha::Workspace tiled;
  std::vector<float> out(10 * 32, -7.0f);
  auto args_for = [&](int32_t n) {
    mha::CacheAttendArgs a;
    a.new_tokens = n;
    a.q = {data.q.data(), 10 * 32, 32};
    a.k = {data.k.data(), 10 * 16, 16};
    a.v = {data.v.data(), 10 * 16, 16};
    a.out = {out.data(), 10 * 32, 32};
    a.options = c.options();
    return a;
  };
  REQUIRE(mha::cache_attend(*cache, args_for(5), scratch, nullptr, tiled) == Status::kOk);
  std::vector<float> k_before(5 * 16), v_before(5 * 16);
  cache->read(k_before.data(), v_before.data(), 0, cache->min_length());
  out.assign(out.size(), -7.0f);
  auto expect = [&](mha::CacheAttendArgs a, Status status) {
    REQUIRE(mha::validate_cache_attend(*cache, a) == status);
    REQUIRE(mha::cache_attend(*cache, a, scratch, nullptr, tiled) == status);
    REQUIRE(cache->max_length() == 5);
    std::vector<float> k_now(5 * 16), v_now(5 * 16);
    cache->read(k_now.data(), v_now.data(), 0, cache->min_length());
    REQUIRE(bit_equal(k_now, k_before));
    REQUIRE(bit_equal(v_now, v_before));
    for (float x : out) REQUIRE(x == -7.0f);
  };
  expect(args_for(4), Status::kCacheFull);  // 5 + 4 > 8
  expect(args_for(0), Status::kNonPositiveDim);
  auto a = args_for(1);
  a.options.num_heads = 3;  // not a multiple of Hkv = 2
  expect(a, Status::kCacheHeadsMismatch);
  a.options.num_heads = 0;
  expect(a, Status::kCacheHeadsMismatch);
  a = args_for(1);
  a.options.window_left = -2;
  expect(a, Status::kCacheBadOption);
  a = args_for(1);
  a.options.softcap = -1.0f;
  expect(a, Status::kCacheBadOption);
  a.options.softcap = kNaN;
  expect(a, Status::kCacheBadOption);
  a = args_for(1);
  const std::vector<float> slopes{0.1f, kInf, 0.1f, 0.1f};
  a.options.alibi_slopes = slopes.data();
  expect(a, Status::kCacheBadOption);
  a = args_for(1);
  a.options.scale = kNaN;
  expect(a, Status::kBadScale);
  a = args_for(1);
  a.k.data = nullptr;
  expect(a, Status::kNullPointer);
  a = args_for(1);
  a.out.data = nullptr;
  expect(a, Status::kNullPointer);
  // And the cache still works.
  REQUIRE(mha::cache_attend(*cache, args_for(3), scratch, nullptr, tiled) == Status::kOk);
  REQUIRE(cache->max_length() == 8);
}

TEST_CASE("decode: 20,000 steps of appends, truncates, creates and frees leave the heap where it started", "[decode][memory]") {
  const size_t heap_at_start = mha_test::heap_bytes_in_use();
  {
    const CacheCase c = make_case(1, 4, 2, 16, {64});
    const CacheData data = case_data(c, 1200);
    mha::KVCacheRegistry registry;
    mha::DecodeScratch scratch;
    mha::Workspace tiled;
    auto steps = [&](int count) {
      uint32_t id = 0;
      for (int step = 0; step < count; ++step) {
        if (step % 1000 == 0) {
          if (id != 0) REQUIRE(registry.free(id) == Status::kOk);
          REQUIRE(registry.create(c.config(), &id) == Status::kOk);
        }
        mha::KVCache& cache = *registry.find(id);
        const int32_t n = step % 7 == 0 ? 5 : 1;
        if (cache.max_length() + n > 64) REQUIRE(cache.truncate(step % 13) == Status::kOk);
        mha::CacheAttendArgs args;
        args.new_tokens = n;
        args.q = {data.q.data(), 64 * 64, 64};
        args.k = {data.k.data(), 64 * 32, 32};
        args.v = {data.v.data(), 64 * 32, 32};
        std::vector<float> out(size_t(n) * 64);
        args.out = {out.data(), int64_t{n} * 64, 64};
        args.options = c.options();
        REQUIRE(mha::cache_attend(cache, args, scratch, nullptr, tiled) == Status::kOk);
        if (step % 3 == 0) REQUIRE(cache.truncate(cache.max_length() / 2) == Status::kOk);
      }
      REQUIRE(registry.free(id) == Status::kOk);
    };
    steps(1000);  // the scratch grows to its largest
    const size_t heap_warm = mha_test::heap_bytes_in_use();
    steps(20000);
    REQUIRE(mha_test::heap_back_to(heap_warm, mha_test::heap_bytes_in_use()));
    scratch.release();
    tiled.release();
    registry.free_all();
  }
  REQUIRE(mha_test::heap_back_to(heap_at_start, mha_test::heap_bytes_in_use()));
}

TEST_CASE("decode: golden v2 cache cases through the C++ API, within the golden tolerance", "[decode][golden]") {
  int run = 0;
  for (const mha_test::GoldenCase& g : mha_test::load_golden_set("v2")) {
    if (g.kind != "cache") continue;
    INFO("golden case " << g.name);
    CacheCase c;
    c.batch = g.shape.batch;
    c.heads = g.shape.num_heads;
    c.head_dim = g.entry.at("headDim").as_int();
    c.kv_heads = g.num_kv_heads;
    const mha_test::Json& options = g.entry.at("options");
    c.causal = options.find("causal") == nullptr || options.at("causal").boolean;
    if (options.find("window") != nullptr) {
      auto bound = [](const mha_test::Json& w) { return w.type == mha_test::Json::Type::kString ? -1 : w.as_int(); };
      c.window_left = bound(options.at("window").array.at(0));
      c.window_right = bound(options.at("window").array.at(1));
    }
    for (const char* unsupported : {"softcap", "alibiSlopes", "scale", "emptyRows", "queryOffset", "kvLengths", "biasShape"})
      REQUIRE(options.find(unsupported) == nullptr);  // none in the vendored set; a new one would need handling here
    const mha_test::Json& cache = g.entry.at("cache");
    for (const mha_test::Json& n : cache.at("steps").array) c.steps.push_back(n.as_int());
    c.capacity = cache.at("capacity").as_int();
    c.dtype = cache.at("dtype").string == "float16" ? CacheDType::kFloat16 : CacheDType::kFloat32;
    REQUIRE(c.total() == g.shape.seq_len);
    const int64_t rows = int64_t{c.batch} * c.total();
    CacheData data{g.read<float>("q", rows * c.q_width()), g.read<float>("k", rows * c.kv_width()),
                   g.read<float>("v", rows * c.kv_width())};
    const auto out64 = g.read<float>("out64", rows * c.q_width());
    const auto out32 = g.read<float>("out32", rows * c.q_width());
    const double tolerance = mha_test::golden_tolerance(out64, out32);
    for (const mha::DecodeKernel* kernel : kernels()) {
      INFO("kernel " << mha::decode_kernel_name(*kernel));
      Runner runner;
      runner.kernel = kernel;
      const auto out = run_cache(c, data, runner);
      double worst = 0.0;
      for (size_t e = 0; e < out.size(); ++e) {
        REQUIRE(std::isnan(out[e]) == std::isnan(out64[e]));
        if (!std::isnan(out64[e])) worst = std::max(worst, std::fabs(double(out[e]) - double(out64[e])));
      }
      INFO("worst error " << worst << ", tolerance " << tolerance);
      REQUIRE(worst <= tolerance);
    }
    ++run;
  }
  REQUIRE(run == 3);
}

TEST_CASE("decode: the simd128 kernel's path of a block follows its dtype, rows, q and halves", "[decode]") {
  using mha::DecodeLoader;
  const int32_t dh = 16;
  std::vector<float> q_row(dh, 1.0f);
  std::vector<const float*> q_rows(mha::kDecodeMaxRowsPerItem, q_row.data());
  auto path_of = [&](CacheDType dtype, int32_t rows) {
    mha::DecodeBlock blk;
    blk.dtype = dtype;
    blk.head_dim = dh;
    blk.dv8 = dh;
    blk.rows = rows;
    blk.q_rows = q_rows.data();
    return mha::simd128::choose_decode_path(blk);
  };
  struct Expected {
    CacheDType dtype;
    int32_t rows;
    DecodeLoader loader;
    bool stage_k, stage_v, touch_block;
  };
  const Expected expected[] = {
      {CacheDType::kFloat32, 1, DecodeLoader::kFloat32, false, false, false},
      {CacheDType::kFloat32, 2, DecodeLoader::kFloat32, true, false, false},
      {CacheDType::kFloat32, 3, DecodeLoader::kFloat32, false, false, true},
      {CacheDType::kFloat32, 32, DecodeLoader::kFloat32, false, false, true},
      {CacheDType::kFloat16, 1, DecodeLoader::kFloat16Pairs, false, false, false},
      {CacheDType::kFloat16, 2, DecodeLoader::kFloat16Scaled, true, false, false},
      {CacheDType::kFloat16, 4, DecodeLoader::kFloat16Scaled, false, true, false},
      {CacheDType::kFloat16, 8, DecodeLoader::kFloat16Scaled, true, true, false},
      {CacheDType::kBFloat16, 1, DecodeLoader::kBFloat16Pairs, false, false, false},
      {CacheDType::kBFloat16, 2, DecodeLoader::kBFloat16, true, false, false},
      {CacheDType::kBFloat16, 4, DecodeLoader::kBFloat16, false, true, false},
      {CacheDType::kBFloat16, 8, DecodeLoader::kBFloat16, true, true, false},
      {CacheDType::kInt8, 1, DecodeLoader::kInt8, true, true, false},
      {CacheDType::kInt8, 8, DecodeLoader::kInt8, true, true, false},
  };
  for (const Expected& e : expected) {
    INFO("dtype " << static_cast<int>(e.dtype) << ", " << e.rows << " rows");
    const mha::DecodePath path = path_of(e.dtype, e.rows);
    REQUIRE(path.loader == e.loader);
    REQUIRE(path.stage_k == e.stage_k);
    REQUIRE(path.stage_v == e.stage_v);
    REQUIRE(path.touch_block == e.touch_block);
    const bool f16 = e.dtype == CacheDType::kFloat16;
    REQUIRE(path.fold_q == f16);  // float16 folds the widening's 2^112 into q and the weights
    REQUIRE(path.p_scale == (f16 ? mha::f16::kWidenScale : 1.0f));
  }
  // The cold float16 blocks go to the scalar kernel: q too large to fold, or not finite.
  for (float bad : {1e5f, kInf, kNaN}) {
    q_row[3] = bad;
    REQUIRE(path_of(CacheDType::kFloat16, 1).loader == DecodeLoader::kScalarKernel);
    REQUIRE(path_of(CacheDType::kFloat32, 1).loader == DecodeLoader::kFloat32);  // float32 needs no fold
  }
  q_row[3] = 1.0f;
  mha::DecodeBlock specials;
  specials.dtype = CacheDType::kFloat16;
  specials.specials = true;  // inf/NaN halves in the block
  specials.head_dim = dh;
  specials.dv8 = dh;
  specials.rows = 4;
  specials.q_rows = q_rows.data();
  REQUIRE(mha::simd128::choose_decode_path(specials).loader == DecodeLoader::kScalarKernel);
}

TEST_CASE("decode: every tiled kernel variant of the build has its decode kernel, in the same order", "[decode]") {
  std::vector<std::string> tiled, decode;
  for (const mha::KernelVariant* kernel : mha::kernel_variants()) tiled.push_back(kernel->name);
  for (const mha::DecodeKernel* kernel : mha::decode_kernel_variants()) decode.push_back(mha::decode_kernel_name(*kernel));
  INFO("tiled " << tiled.size() << ", decode " << decode.size());
  REQUIRE(decode == tiled);  // kernel_table.cpp lists both per variant (the test cores have scalar too)
  REQUIRE(std::string(mha::decode_kernel_name(mha::default_decode_kernel())) == mha::default_kernel().name);
}
