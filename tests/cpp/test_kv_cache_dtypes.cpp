// The bfloat16, int8 and int4 caches (docs/spec.md 4.8, 5.1): their codecs against definitions by value, what
// append stores and read returns, the bytes they take, and the refusal of inf and NaN by int8 and int4.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "mha/cache/cache_codecs.hpp"
#include "mha/cache/kv_cache.hpp"
#include "test_util.hpp"

namespace {

using mha::CacheDType;
using mha::KVCache;
using mha::KVCacheConfig;
using mha::Status;

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

// bfloat16 by value: of the two bfloat16 neighbours of x (x with its low 16 bits cleared, and the next one
// up in magnitude), the nearer, ties to the even one; past the largest finite value, inf.
float bf16_by_value(float x) {
  const float down = from_bits(bits(x) & 0xffff0000u);
  const float up = from_bits((bits(x) & 0xffff0000u) + 0x10000u);  // inf past the largest: 2^128 by value
  const double up_value = std::isinf(up) ? std::copysign(0x1p128, double(x)) : double(up);
  const double dd = std::fabs(double(x) - double(down)), du = std::fabs(up_value - double(x));
  if (dd < du) return down;
  if (du < dd) return up;
  return (bits(down) & 0x10000u) == 0 ? down : up;
}

std::unique_ptr<KVCache> make_cache(const KVCacheConfig& config) {
  std::unique_ptr<KVCache> cache;
  REQUIRE(KVCache::create(config, cache) == Status::kOk);
  return cache;
}

}  // namespace

TEST_CASE("kv cache dtypes: bfloat16 rounds to nearest even, keeps NaN, overflows to inf, reads back exactly",
          "[kv_cache]") {
  for (uint32_t b = 0; b < 0x7f800000u; b += 0x3f1u) {  // finite floats of every exponent, both signs
    for (float x : {from_bits(b), -from_bits(b)}) {
      INFO("bits " << bits(x));
      REQUIRE(bits(mha::bf16::decode(mha::bf16::encode(x))) == bits(bf16_by_value(x)));
    }
  }
  CHECK(mha::bf16::decode(mha::bf16::encode(1.0f + 0x1p-8f)) == 1.0f);                // tie to even (down)
  CHECK(mha::bf16::decode(mha::bf16::encode(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);  // tie to even (up)
  CHECK(std::isinf(mha::bf16::decode(mha::bf16::encode(std::numeric_limits<float>::max()))));
  CHECK(mha::bf16::encode(-std::numeric_limits<float>::infinity()) == 0xff80);
  const uint16_t nan = mha::bf16::encode(from_bits(0x7f800001u));  // a signalling NaN whose payload is below bit 16
  CHECK(std::isnan(mha::bf16::decode(nan)));
  CHECK(mha::bf16::encode(from_bits(0xffc12345u)) == 0xffc1);  // quiet NaN: sign and upper payload kept
  for (uint32_t h = 0; h < 0x10000u; ++h) {                    // every bfloat16 is a float32 exactly
    const float x = mha::bf16::decode(uint16_t(h));
    if (!std::isnan(x)) REQUIRE(mha::bf16::encode(x) == h);
  }
}

TEST_CASE("kv cache dtypes: int8 quantizes per block of 32 as q8_0 and reads back q * scale", "[kv_cache]") {
  std::vector<float> x = mha_test::random_tensor(70, 5, 4.0f);
  x[33] = 0.0f;
  for (int i = 64; i < 70; ++i) x[size_t(i)] = 0.0f;  // a last, short block of zeros: scale 0
  x[7] = -9.5f;                                       // block 0's amax: q = -127
  std::vector<int8_t> q(70);
  float scales[3];
  mha::q8::quantize_row(x.data(), 70, q.data(), 1, scales, 1);
  CHECK(scales[0] == 9.5f / 127.0f);
  CHECK(q[7] == -127);
  CHECK(scales[2] == 0.0f);
  for (int i = 0; i < 70; ++i) {
    const float scale = scales[i / 32];
    const float want = scale == 0.0f ? 0.0f : std::nearbyint(x[size_t(i)] / scale);
    REQUIRE(float(q[size_t(i)]) == want);
    REQUIRE(std::fabs(want) <= 127.0f);
  }
  std::vector<float> y(70);
  mha::q8::round_row(x.data(), y.data(), 70);
  for (int i = 0; i < 70; ++i) REQUIRE(y[size_t(i)] == float(q[size_t(i)]) * scales[i / 32]);
  // A tie rounds to even: 2.5 * scale -> 2.
  float tie[2] = {127.0f, 2.5f};
  int8_t tq[2];
  float ts;
  mha::q8::quantize_row(tie, 2, tq, 1, &ts, 1);
  CHECK(ts == 1.0f);
  CHECK(tq[1] == 2);
}

TEST_CASE("kv cache dtypes: append stores and read returns the values of the codecs, K and V, every Dh and Dv",
          "[kv_cache]") {
  for (CacheDType dtype : {CacheDType::kBFloat16, CacheDType::kInt8, CacheDType::kInt4}) {
    for (int32_t head_dim : {1, 8, 31, 33, 64, 100}) {
      const int32_t value_dim = head_dim == 33 ? 40 : 0;
      const KVCacheConfig config{2, 3, head_dim, 70, dtype, value_dim};
      INFO("dtype " << int(dtype) << " Dh " << head_dim);
      auto cache = make_cache(config);
      const int32_t n = 37, kw = 3 * head_dim, vw = 3 * config.value_dim();
      const auto k = mha_test::random_tensor(size_t(2) * n * kw, 11, 3.0f);
      const auto v = mha_test::random_tensor(size_t(2) * n * vw, 12, 3.0f);
      REQUIRE(cache->append({k.data(), int64_t{n} * kw, kw}, {v.data(), int64_t{n} * vw, vw}, n) == Status::kOk);
      std::vector<float> k_want = k, v_want = v, k_read(k.size()), v_read(v.size());
      mha::round_as_stored(dtype, k_want.data(), k_want.data(), int64_t{2} * n * 3, head_dim);
      mha::round_as_stored(dtype, v_want.data(), v_want.data(), int64_t{2} * n * 3, config.value_dim());
      REQUIRE(cache->read(k_read.data(), v_read.data(), 0, n) == Status::kOk);
      REQUIRE(std::memcmp(k_read.data(), k_want.data(), k.size() * 4) == 0);
      REQUIRE(std::memcmp(v_read.data(), v_want.data(), v.size() * 4) == 0);
      std::vector<float> stored_k(k.size()), stored_v(v.size());  // read_stored gives float32 too
      REQUIRE(cache->read_stored(stored_k.data(), stored_v.data(), 0, n) == Status::kOk);
      REQUIRE(std::memcmp(stored_k.data(), k_want.data(), k.size() * 4) == 0);
    }
  }
}

TEST_CASE("kv cache dtypes: bytes per token and head as documented", "[kv_cache]") {
  // K (B, Hkv, ceil(cap / 32) * 32, Dh) and V (B, Hkv, cap, Dv8) elements; int8 adds the float32 scales of
  // every 32 head-dim elements of each key (over the panels' capacity) and value.
  const KVCacheConfig f32{1, 8, 64, 4096, CacheDType::kFloat32};
  auto bytes = [&](CacheDType dtype) {
    KVCacheConfig c = f32;
    c.dtype = dtype;
    return mha::kv_cache_bytes(c);
  };
  CHECK(bytes(CacheDType::kFloat32) == 8.0 * 4096 * 8 * 64);
  CHECK(bytes(CacheDType::kFloat16) == 4.0 * 4096 * 8 * 64);
  CHECK(bytes(CacheDType::kBFloat16) == 4.0 * 4096 * 8 * 64);
  CHECK(bytes(CacheDType::kInt8) == (2.0 * 64 + 8.0 * 2) * 4096 * 8);  // docs/spec.md 4.8: 2 Dh + 8 ceil(Dh / 32)
  const KVCacheConfig odd{2, 3, 40, 33, CacheDType::kInt8, 12};        // 2 panels, Dv8 16, NBk 2, NBv 1
  CHECK(mha::kv_cache_bytes(odd) == double(2 * 3 * (64 * 40 + 33 * 16 + 64 * 2 * 4 + 33 * 1 * 4)));
  // docs/spec.md 5.1: Dh / 2 + 4 ceil(Dh / 32) each for k and v: 80 bytes per token and head at Dh 64, 6.4x
  // fewer than float32's 512.
  CHECK(bytes(CacheDType::kInt4) == 80.0 * 4096 * 8);
  CHECK(bytes(CacheDType::kFloat32) / bytes(CacheDType::kInt4) == 6.4);
  KVCacheConfig odd4 = odd;
  odd4.dtype = CacheDType::kInt4;
  CHECK(mha::kv_cache_bytes(odd4) == double(2 * 3 * (64 * 40 / 2 + 33 * 16 / 2 + 64 * 2 * 4 + 33 * 1 * 4)));
}

TEST_CASE("kv cache dtypes: int4 quantizes per block of 32 to [-7, 7], ties to even, and packs two per byte",
          "[kv_cache]") {
  // One token of one head, Dh 37 (a block of 32 and one of 5): values chosen so that each q is known.
  const KVCacheConfig config{1, 1, 37, 40, CacheDType::kInt4, 37};
  auto cache = make_cache(config);
  std::vector<float> k(37), v(37);
  for (int i = 0; i < 37; ++i) k[size_t(i)] = float(i % 15 - 7) * 0.5f;  // block 0: amax 3.5, scale 0.5: q = i % 15 - 7
  k[3] = 1.25f;                                                          // 2.5 * scale: a tie, to even: q = 2
  k[4] = 1.75f;                                                          // 3.5 * scale: to even: q = 4
  for (int i = 32; i < 37; ++i) k[size_t(i)] = 0.0f;                     // a short block of zeros: scale 0
  for (int i = 0; i < 37; ++i) v[size_t(i)] = -k[size_t(i)] * 4.0f;
  v[36] = 100.0f;  // block 1 of v: amax 100, every other value 0
  REQUIRE(cache->append({k.data(), 37, 37}, {v.data(), 37, 37}, 1) == Status::kOk);
  std::vector<float> k_read(37), v_read(37);
  REQUIRE(cache->read(k_read.data(), v_read.data(), 0, 1) == Status::kOk);
  for (int i = 0; i < 32; ++i) {
    const float q = i == 3 ? 2.0f : i == 4 ? 4.0f : float(i % 15 - 7);
    INFO("element " << i);
    REQUIRE(k_read[size_t(i)] == q * 0.5f);
    REQUIRE(v_read[size_t(i)] == -q * 2.0f);  // scale 2
  }
  for (int i = 32; i < 37; ++i) REQUIRE(k_read[size_t(i)] == 0.0f);
  CHECK(v_read[36] == 100.0f);
  CHECK(v_read[32] == 0.0f);
  // The nibbles where codec_int4.hpp puts them: key 0 of panel row d at byte d * 16 (low nibble); value lanes
  // 2i and 2i + 1 in byte i. Two's complement: q = -7 is 0x9.
  const auto* panels = static_cast<const uint8_t*>(cache->head_block(0, 0, 1).key_panels);
  const auto* rows = static_cast<const uint8_t*>(cache->head_block(0, 0, 1).value_rows);
  CHECK((panels[0] & 0x0f) == 0x9);       // key 0, d 0: q -7
  CHECK((panels[16 * 3] & 0x0f) == 0x2);  // d 3: q 2
  CHECK(rows[0] == 0x67);                 // v lanes 0, 1: q 7 (low nibble), 6 (high)
  // A key in column 17 of a panel: the high nibble of byte 1 of each panel row.
  REQUIRE(cache->append({k.data(), 37, 37}, {v.data(), 37, 37}, 1) == Status::kOk);
  for (int j = 2; j < 18; ++j) REQUIRE(cache->append({k.data(), 37, 37}, {v.data(), 37, 37}, 1) == Status::kOk);
  CHECK((panels[1] >> 4) == 0x9);
  CHECK(cache->key(0, 0, 17, 3) == 1.0f);
}

TEST_CASE("kv cache dtypes: int8 and int4 refuse inf and NaN in k or v, rotated keys included, and store nothing",
          "[kv_cache]") {
  const CacheDType dtype = GENERATE(CacheDType::kInt8, CacheDType::kInt4);
  const KVCacheConfig config{2, 2, 8, 16, dtype};
  auto cache = make_cache(config);
  const int32_t n = 3, w = 16;
  auto k = mha_test::random_tensor(size_t(2) * n * w, 1), v = mha_test::random_tensor(size_t(2) * n * w, 2);
  REQUIRE(cache->append({k.data(), n * w, w}, {v.data(), n * w, w}, n) == Status::kOk);
  std::vector<float> before_k(size_t(2) * n * w), before_v(before_k.size()), after_k(before_k.size()),
      after_v(before_k.size());
  REQUIRE(cache->read(before_k.data(), before_v.data(), 0, n) == Status::kOk);
  for (int which = 0; which < 3; ++which) {
    auto k2 = k, v2 = v;
    if (which == 0) k2[size_t(w) * n + 5] = std::numeric_limits<float>::infinity();  // sequence 1
    if (which == 1) v2[2] = std::numeric_limits<float>::quiet_NaN();
    const int32_t counts[] = {n, which == 2 ? 0 : n};
    if (which == 2) k2[size_t(w) * n] = std::numeric_limits<float>::quiet_NaN();  // a padding row: not read
    const Status want = which == 2 ? Status::kOk : Status::kCacheNonFinite;
    REQUIRE(cache->truncate(n) == Status::kOk);
    REQUIRE(cache->append({k2.data(), n * w, w}, {v2.data(), n * w, w}, n, nullptr, counts) == want);
    if (want != Status::kOk) REQUIRE(cache->length(0) == n);
    REQUIRE(cache->length(1) == n);
    REQUIRE(cache->read(after_k.data(), after_v.data(), 0, n) == Status::kOk);
    REQUIRE(after_k == before_k);
    REQUIRE(after_v == before_v);
  }
  // A finite key that its rotation overflows.
  std::vector<float> cos(size_t(4) * 16, 1.0f), sin(size_t(4) * 16, 1.0f);
  const mha::RotaryTables rope{cos.data(), sin.data(), 16, 8, false};
  REQUIRE(cache->truncate(n) == Status::kOk);
  auto big = k;
  big[size_t(n) * w * 0 + 0] = 3e38f, big[4] = 3e38f;  // x0 cos - x4 sin, x4 cos + x0 sin: 6e38 overflows
  REQUIRE(cache->append({big.data(), n * w, w}, {v.data(), n * w, w}, 1, &rope) == Status::kCacheNonFinite);
  REQUIRE(cache->length(0) == n);
}
