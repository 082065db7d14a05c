// The SIMD decode kernel's paths (decode_path.hpp: choose_decode_path) and the edge cases each path
// must get right against the double-precision reference (decode_case.hpp): float16 subnormal halves,
// non-finite inputs and float32 overflow, and the int8 one-row fold's scaling (tiny and huge values, q
// past its bound).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "decode_case.hpp"
#include "mha/decode/decode_path.hpp"
#include "mha/core/f16.hpp"
#include "test_util.hpp"

namespace {

using mha::CacheDType;
using mha_test::kInf;
using mha_test::kNaN;
using mha_test::require_close;
using namespace decode_case;

// The case's output through every decode kernel, checked against the reference at 2^-e times both
// (the case's data already scaled by 2^e somewhere): a precision check for values far from 1, where
// require_close's floor of 1 on the reference's magnitude would accept anything. Returns the rows that
// took the driver's exact path (not finite in float32), over all kernels.
int64_t require_kernels_match_reference_scaled(const CacheCase& c, const CacheData& data, int e) {
  INFO(describe(c) << ", output scaled by 2^" << -e);
  std::vector<float> ref = reference_for(c, data);
  for (float& x : ref) x = std::ldexp(x, -e);
  int64_t exact_rows = 0;
  for (const mha::DecodeKernel* kernel : kernels()) {
    INFO("kernel " << mha::decode_kernel_name(*kernel));
    mha::DecodeScratch scratch;
    Runner run;
    run.kernel = kernel;
    run.path = mha::CachePath::kDecodeKernel;
    run.scratch = &scratch;
    std::vector<float> out = run_cache(c, data, run);
    for (float& x : out) x = std::ldexp(x, -e);
    require_close(ref, out);
    exact_rows += scratch.counters.exact_rows.load();
  }
  return exact_rows;
}

}  // namespace

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

TEST_CASE("decode: non-finite inputs and float32 overflow get the reference's answer", "[decode]") {
  for (CacheDType dtype : {CacheDType::kFloat32, CacheDType::kFloat16}) {
    CacheCase c = make_case(1, 4, 2, 8, {12, 1, 1, 1}, dtype);
    CacheData data = case_data(c, 900);
    const int32_t D = c.q_width(), Dkv = c.kv_width();
    data.q[size_t(3) * D + 1] = kNaN;          // a NaN query element: its row of head 0 is NaN
    data.k[size_t(5) * Dkv + Dkv - 1] = kInf;  // an infinite key of KV head 1 (heads 2, 3)
    data.v[size_t(10) * Dkv + 2] = kNaN;       // V of key 10, hidden from queries < 10 of its step
    data.q[size_t(13) * D + 8] = 1e20f;        // q . k past float32 (1e20 * 1e20 and more): the double
    data.k[size_t(4) * Dkv] = 3e19f;           // reference stays finite (f16: k overflows to inf)
    data.q[size_t(13) * D] = 3e19f;
    require_kernels_match_reference(c, data);
  }
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
      {CacheDType::kInt8, 1, DecodeLoader::kInt8Row, false, false, false},
      {CacheDType::kInt8, 2, DecodeLoader::kInt8, true, true, false},
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
    REQUIRE(path_of(CacheDType::kInt8, 1).loader == DecodeLoader::kInt8);        // int8's fold bounds q too
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

TEST_CASE("decode: the int8 one-row fold keeps its precision for tiny and huge values, and q past its bound",
          "[decode]") {
  // One row per KV head (the fold: scales applied per block of 32, the widening's 2^24 taken out per
  // block of scores and once per o), Dh 64 (two blocks) and Dh 40 (a block of 8, Dv8 % 16 == 8).
  for (const CacheCase& shape :
       {make_case(1, 4, 4, 64, {40, 1, 1}, CacheDType::kInt8), make_case(1, 2, 2, 40, {37, 1, 2}, CacheDType::kInt8)}) {
    // V near 2^-100: its scales near 2^-107, no subnormal weight on the way. V near 2^110: the SIMD
    // kernels' 2^24-scaled sums of o overflow float32 while the true o is finite, and those rows take
    // the driver's exact path.
    for (int e : {-100, 110}) {
      CacheData data = case_data(shape, 950);
      for (float& x : data.v) x = std::ldexp(x, e);
      const int64_t exact_rows = require_kernels_match_reference_scaled(shape, data, e);
      if (e < 0) REQUIRE(exact_rows == 0);
      if (e > 0 && kernels().size() > 1) REQUIRE(exact_rows > 0);  // a SIMD kernel beside the scalar one
    }
    // K near 2^-100 (scores near 0), q near 2^100 / 10^5 (past kMaxFoldableQ: the staged path), K and q
    // both near 2^-60 (products near 2^-120).
    CacheData tiny_k = case_data(shape, 960);
    for (float& x : tiny_k.k) x = std::ldexp(x, -100);
    require_kernels_match_reference(shape, tiny_k);
    CacheData large_q = case_data(shape, 970);
    for (float& x : large_q.q) x *= 1e5f;
    require_kernels_match_reference(shape, large_q);
    CacheData small_qk = case_data(shape, 980);
    for (float& x : small_qk.q) x = std::ldexp(x, -60);
    for (float& x : small_qk.k) x = std::ldexp(x, -60);
    require_kernels_match_reference(shape, small_qk);
  }
}
