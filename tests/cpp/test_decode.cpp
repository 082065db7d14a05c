// Attention through the KV cache (src/mha/decode/decode.hpp): every decode kernel variant against the
// double-precision reference (src/mha/reference/reference.hpp) on the equivalent multi-head problem
// (decode_case.hpp). Also: splits into steps, threads, waves, empty rows, errors, heap use over 20,000
// steps, and the golden-v2 cache cases. The kernel's paths and their edge cases: test_decode_paths.cpp.
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

#include "decode_case.hpp"
#include "golden.hpp"
#include "heap_usage.hpp"
#include "mha/cache/cache_codecs.hpp"
#include "mha/decode/decode.hpp"
#include "mha/decode/decode_path.hpp"
#include "mha/core/f16.hpp"
#include "mha/kernels/kernel.hpp"
#include "mha/cache/kv_cache.hpp"
#include "mha/core/parallel.hpp"
#include "mha/reference/reference.hpp"
#include "test_util.hpp"

static_assert(mha::test_seam::kEnabled, "the test cores count the decode driver's paths (src/mha/core/test_seam.hpp)");

namespace {

using namespace decode_case;  // CacheCase, the harness and the suite's checks (decode_case.hpp)

}  // namespace

TEST_CASE("decode: every kernel equals the reference for MHA, GQA and MQA, every dtype, many head dims", "[decode]") {
  const std::vector<CacheCase> shapes = {
      make_case(1, 4, 4, 8, {9, 1, 1, 1}),       make_case(2, 4, 2, 16, {6, 1, 1, 3, 1}),
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
    for (CacheDType dtype :
         {CacheDType::kFloat32, CacheDType::kFloat16, CacheDType::kBFloat16, CacheDType::kInt8, CacheDType::kInt4}) {
      c.dtype = dtype;
      require_kernels_match_reference(c, case_data(c, seed += 10));
    }
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
        args.options() = c.options();
        args.num_heads = c.heads;
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
    cases.push_back(make_case(1, 6, 1, 16, {40}, dtype));        // MQA
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
      make_case(1, 16, 1, 64, {1500, 1, 2}, CacheDType::kInt8),
      make_case(2, 8, 2, 40, {700, 1, 3}, CacheDType::kInt4),
  };
  uint32_t seed = 700;
  for (CacheCase c : shapes) {
    c.integer =
        c.dtype == CacheDType::kInt8 || c.dtype == CacheDType::kInt4;  // integer arithmetic (decode_integer.hpp)
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
        require_close(reference_for(c, data), out, c.integer ? 1e-3f : mha_test::kTol);  // docs/spec.md 5.1
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
    a.options() = c.options();
    a.num_heads = c.heads;
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
  a.num_heads = 3;  // not a multiple of Hkv = 2
  expect(a, Status::kCacheHeadsMismatch);
  a.num_heads = 0;
  expect(a, Status::kCacheHeadsMismatch);
  a = args_for(1);
  a.window_left = -2;  // the stateless call's statuses: one validator of the options
  expect(a, Status::kBadWindow);
  a = args_for(1);
  a.softcap = -1.0f;
  expect(a, Status::kBadSoftcap);
  a.softcap = kNaN;
  expect(a, Status::kBadSoftcap);
  a = args_for(1);
  const std::vector<float> slopes{0.1f, kInf, 0.1f, 0.1f};
  a.alibi_slopes = slopes.data();
  expect(a, Status::kBadAlibiSlope);
  a = args_for(1);
  a.empty_rows = static_cast<mha::EmptyRows>(2);
  expect(a, Status::kBadEmptyRows);
  a = args_for(1);
  a.scale = kNaN;
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

TEST_CASE("decode: 20,000 steps of appends, truncates, creates and frees leave the heap where it started",
          "[decode][memory]") {
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
        args.options() = c.options();
        args.num_heads = c.heads;
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
    for (const char* unsupported :
         {"softcap", "alibiSlopes", "scale", "emptyRows", "queryOffset", "kvLengths", "biasShape"})
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

TEST_CASE("decode: every tiled kernel variant of the build has its decode kernel, in the same order", "[decode]") {
  std::vector<std::string> tiled, decode;
  for (const mha::KernelVariant* kernel : mha::kernel_variants()) tiled.push_back(kernel->name);
  for (const mha::DecodeKernel* kernel : mha::decode_kernel_variants())
    decode.push_back(mha::decode_kernel_name(*kernel));
  INFO("tiled " << tiled.size() << ", decode " << decode.size());
  REQUIRE(decode == tiled);  // kernel_table.cpp lists both per variant (the test cores have scalar too)
  REQUIRE(std::string(mha::decode_kernel_name(mha::default_decode_kernel())) == mha::default_kernel().name);
}
