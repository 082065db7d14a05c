// Integer arithmetic on int8 and int4 caches (docs/spec.md 5.1): within the stated bound of float64
// attention over the read-back values, and the same bits in every kernel variant of the build (the wasm
// relaxed suite holds relaxed, simd128 and scalar), every thread count and every split into steps' path.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "decode_case.hpp"

using namespace decode_case;

namespace {

float max_abs(const std::vector<float>& x) {
  float m = 0.0f;
  for (float y : x) m = std::max(m, std::fabs(y));
  return m;
}

// The values a cache of the case's dtype reads back (every token's KV head row rounded as stored).
std::vector<float> read_back(const CacheCase& c, std::vector<float> x) {
  mha::round_as_stored(c.dtype, x.data(), x.data(), int64_t(x.size()) / c.head_dim, c.head_dim);
  return x;
}

// docs/spec.md 5.1's bound: |out - ref| <= 1e-3 max |v read back| + 1e-6 per element, |lse - ref| <= 1e-3
// (ref: the reference, float64 inside, over the read-back values). Returns the worst out error as a
// fraction of its bound, for the summary.
double require_within_bound(const CacheCase& c, const CacheData& data, const std::vector<float>& out,
                            const std::vector<float>& lse) {
  std::vector<float> ref_lse;
  const std::vector<float> ref = reference_for(c, data, &ref_lse);
  const double bound = 1e-3 * double(max_abs(read_back(c, data.v))) + 1e-6;
  double worst = 0.0;
  REQUIRE(ref.size() == out.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(ref[i])) {
      REQUIRE(std::isnan(out[i]));
      continue;
    }
    const double err = std::fabs(double(out[i]) - double(ref[i]));
    INFO("out element " << i << ": " << out[i] << " against " << ref[i]);
    REQUIRE(err <= bound);
    worst = std::max(worst, err / bound);
  }
  for (size_t i = 0; i < ref_lse.size(); ++i) {
    if (!std::isfinite(ref_lse[i])) {
      REQUIRE(bit_equal(std::vector<float>{ref_lse[i]}, std::vector<float>{lse[i]}));
      continue;
    }
    INFO("lse element " << i << ": " << lse[i] << " against " << ref_lse[i]);
    REQUIRE(std::fabs(double(lse[i]) - double(ref_lse[i])) <= 1e-3);
  }
  return worst;
}

// Every variant (decode kernel forced, and the driver's own choice) within the bound and with one result's
// bits.
void require_integer_case(CacheCase c, const CacheData& data) {
  c.integer = true;
  INFO(describe(c) << " integer");
  std::vector<float> first, first_lse;
  for (const mha::DecodeKernel* kernel : kernels()) {
    for (mha::CachePath path : {mha::CachePath::kAuto, mha::CachePath::kDecodeKernel}) {
      INFO("kernel " << mha::decode_kernel_name(*kernel) << " path " << int(path));
      Runner run;
      run.kernel = kernel;
      run.path = path;
      std::vector<float> lse;
      const auto out = run_cache(c, data, run, &lse);
      if (first.empty()) {
        const double worst = require_within_bound(c, data, out, lse);
        WARN(describe(c) << " integer: worst error / bound " << worst);
        first = out, first_lse = lse;
      } else {
        REQUIRE(bit_equal(first, out));
        REQUIRE(bit_equal(first_lse, lse));
      }
    }
  }
}

}  // namespace

TEST_CASE("decode integer: int8 and int4 within the bound, every variant the same bits, GQA, MQA and head dims",
          "[decode][integer]") {
  uint32_t seed = 4100;
  for (CacheDType dtype : {CacheDType::kInt8, CacheDType::kInt4}) {
    for (const CacheCase& shape :
         {make_case(2, 4, 4, 64, {37, 1, 1, 3}, dtype), make_case(1, 8, 2, 40, {70, 1, 2}, dtype),
          make_case(2, 6, 1, 31, {5, 33, 1}, dtype), make_case(1, 2, 1, 100, {600, 1}, dtype),
          make_case(1, 4, 2, 8, {1, 1, 1, 1, 40}, dtype)}) {
      require_integer_case(shape, case_data(shape, seed += 3, 2.0f));
    }
  }
}

TEST_CASE("decode integer: windows, softcap, ALiBi, not causal and empty rows", "[decode][integer]") {
  uint32_t seed = 4200;
  for (CacheDType dtype : {CacheDType::kInt8, CacheDType::kInt4}) {
    CacheCase c = make_case(2, 4, 2, 48, {45, 1, 4, 1}, dtype);
    c.window_left = 9;
    require_integer_case(c, case_data(c, seed += 3));
    c.window_left = 30, c.window_right = 2, c.causal = false, c.softcap = 5.0f;
    require_integer_case(c, case_data(c, seed += 3, 3.0f));
    c = make_case(1, 4, 4, 32, {20, 1, 1}, dtype);
    c.slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
    require_integer_case(c, case_data(c, seed += 3));
    c.slopes.clear();
    c.window_left = 0, c.window_right = 0;  // each query sees its own key only
    c.empty_rows_zero = true;
    require_integer_case(c, case_data(c, seed += 3));
  }
}

TEST_CASE("decode integer: adversarial blocks: zeros, one huge value beside tiny ones, +-amax, short blocks",
          "[decode][integer]") {
  uint32_t seed = 4300;
  for (CacheDType dtype : {CacheDType::kInt8, CacheDType::kInt4}) {
    for (int32_t head_dim : {40, 33, 7}) {  // a block shorter than 32; an odd Dh; one short block only
      CacheCase c = make_case(1, 4, 2, head_dim, {24, 1, 1}, dtype);
      CacheData data = case_data(c, seed += 3);
      const int32_t w = c.kv_width(), rows = c.total();
      for (int32_t t = 0; t < rows; ++t) {
        float* k = data.k.data() + int64_t{t} * w;
        float* v = data.v.data() + int64_t{t} * w;
        switch (t % 4) {
          case 0:  // a block of zeros (scale 0)
            std::fill(k, k + std::min(head_dim, 32), 0.0f), std::fill(v, v + std::min(head_dim, 32), 0.0f);
            break;
          case 1:  // one huge value beside tiny ones: the tiny ones quantize to 0
            for (int32_t d = 0; d < head_dim; ++d) k[d] *= 1e-4f, v[d] *= 1e-4f;
            k[1] = 20.0f, v[2] = -80.0f;
            break;
          case 2:  // +-amax: values at both ends of the range
            for (int32_t d = 0; d < head_dim; ++d) k[d] = d % 2 == 0 ? 3.0f : -3.0f, v[d] = d % 3 == 0 ? -2.5f : 2.5f;
            break;
          default: break;
        }
      }
      // q: one large element in some rows (the q rounding's error grows with
      // amax |q| * sum |k|, docs/spec.md 5.1), and a row of zeros.
      for (size_t i = 0; i < data.q.size(); i += size_t(c.q_width()) * 2) data.q[i] = 4.0f;
      std::fill(data.q.begin(), data.q.begin() + c.q_width(), 0.0f);
      require_integer_case(c, data);
    }
  }
}

TEST_CASE("decode integer: a prefill and any split into steps equal the stateless call within the bound",
          "[decode][integer]") {
  uint32_t seed = 4400;
  for (CacheDType dtype : {CacheDType::kInt8, CacheDType::kInt4}) {
    for (const std::vector<int32_t>& steps :
         {std::vector<int32_t>{64}, {1, 63}, {17, 15, 32}, {8, 8, 8, 8, 8, 8, 8, 8}}) {
      CacheCase c = make_case(1, 4, 2, 64, steps, dtype);
      require_integer_case(c, case_data(c, seed));  // the same data for every split
    }
  }
}

TEST_CASE("decode integer: float arithmetic on int4 equals the reference over the read-back values", "[decode]") {
  uint32_t seed = 4500;
  for (const CacheCase& c :
       {make_case(2, 4, 4, 64, {37, 1, 1}, CacheDType::kInt4), make_case(1, 8, 2, 40, {70, 1, 2}, CacheDType::kInt4),
        make_case(2, 6, 1, 31, {5, 33, 1}, CacheDType::kInt4)}) {
    require_kernels_match_reference(c, case_data(c, seed += 3));
  }
}

TEST_CASE("decode integer: a cache of another dtype refuses integer arithmetic", "[decode][integer]") {
  for (CacheDType dtype : {CacheDType::kFloat32, CacheDType::kFloat16, CacheDType::kBFloat16}) {
    mha::KVCacheConfig config{1, 1, 8, 4, dtype};
    config.integer = true;
    std::unique_ptr<mha::KVCache> cache;
    REQUIRE(mha::KVCache::create(config, cache) == Status::kCacheBadArithmetic);
    REQUIRE(!cache);
  }
}
