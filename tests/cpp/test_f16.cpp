// binary16 conversions (src/mha/core/f16.hpp) against definitions by value: a half's value from its fields
// with ldexp, and round-to-nearest-even as a search for the nearest half (ties to the even code, 65536
// standing for the overflow to infinity). Then the SIMD conversions against the scalar ones.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "mha/core/f16.hpp"
#include "mha/core/f16_tensor.hpp"

namespace {

using mha::f16::bits_float;
using mha::f16::float_bits;

constexpr float kInf = std::numeric_limits<float>::infinity();

// The value of a half from its sign, exponent and mantissa fields (IEEE 754 binary16).
float half_value_by_definition(uint16_t h) {
  const bool negative = (h & 0x8000) != 0;
  const int exponent = (h >> 10) & 31;
  const int mantissa = h & 1023;
  double value;
  if (exponent == 31) {
    value = mantissa == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    value = std::ldexp(double(mantissa), -24);
  } else {
    value = std::ldexp(double(1024 + mantissa), exponent - 25);
  }
  return static_cast<float>(negative ? -value : value);
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || float_bits(a) == float_bits(b); }

// The finite non-negative halves in increasing order (codes 0x0000..0x7bff), and 65536 with the code of
// infinity: rounding as if the exponent were unbounded, 65536 is the next value after 65504, and IEEE
// overflows whatever rounds to it.
struct Candidates {
  std::vector<double> value;
  std::vector<uint16_t> code;
  Candidates() {
    for (uint16_t h = 0; h <= 0x7bff; ++h) {
      value.push_back(half_value_by_definition(h));
      code.push_back(h);
    }
    value.push_back(65536.0);
    code.push_back(0x7c00);
  }
};

// Round to nearest, ties to even, by searching the nearest candidate.
uint16_t encode_by_definition(float x, const Candidates& c) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return static_cast<uint16_t>(0x7e00 | sign);
  const double a = std::fabs(double{x});
  if (a >= 65536.0) return static_cast<uint16_t>(0x7c00 | sign);
  const size_t hi = static_cast<size_t>(std::lower_bound(c.value.begin(), c.value.end(), a) - c.value.begin());
  if (c.value[hi] == a) return static_cast<uint16_t>(c.code[hi] | sign);
  const size_t lo = hi - 1;  // a > 0 = value[0]
  const double below = a - c.value[lo], above = c.value[hi] - a;
  size_t pick = below < above ? lo : hi;
  if (below == above) pick = (c.code[lo] & 1) == 0 ? lo : hi;
  return static_cast<uint16_t>(c.code[pick] | sign);
}

#if MHA_F16_SIMD
// SIMD widening of 8 halves. kScaled results are 2^-112 times the value: multiplied back here (exact:
// a power of two, no overflow for |value| <= 65504).
template <bool kSpecials, bool kScaled>
void simd_decode8(const uint16_t* halves, float* out) {
  alignas(16) uint16_t aligned[8];
  std::memcpy(aligned, halves, sizeof aligned);
  const mha::f16::simd::Constants c;
  mha::f16::simd::VecF lo, hi;
  mha::f16::simd::load8<kSpecials, kScaled>(aligned, lo, hi, c);
  if (kScaled) {
    lo *= mha::f16::simd::VecF(mha::f16::kWidenScale);
    hi *= mha::f16::simd::VecF(mha::f16::kWidenScale);
  }
  lo.store_unaligned(out);
  hi.store_unaligned(out + 4);
}

// SIMD encode of 8 floats; *special = the flag store8 reports.
void simd_encode8(const float* x, uint16_t* halves, bool* special) {
  alignas(16) uint16_t aligned[8];
  *special = mha::f16::simd::store8(mha::f16::simd::VecF::load_unaligned(x),
                                    mha::f16::simd::VecF::load_unaligned(x + 4), aligned);
  std::memcpy(halves, aligned, sizeof aligned);
}
#endif

}  // namespace

TEST_CASE("f16: every half decodes to its value, and encodes back to itself", "[f16]") {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    INFO("half 0x" << std::hex << h);
    const float expected = half_value_by_definition(half);
    REQUIRE(same_float(mha::f16::decode(half), expected));
    if (std::isnan(expected)) {
      const uint16_t again = mha::f16::encode(expected);
      REQUIRE(mha::f16::is_special(again));
      REQUIRE((again & 0x3ff) != 0);                 // still NaN
      REQUIRE((again & 0x8000) == (half & 0x8000));  // sign kept
    } else {
      REQUIRE(mha::f16::encode(expected) == half);
    }
    REQUIRE(mha::f16::is_special(half) == !std::isfinite(expected));
  }
}

TEST_CASE("f16: encode rounds to nearest even at every midpoint, overflows to inf, keeps signed zero", "[f16]") {
  const Candidates c;
  // Every midpoint between neighbouring halves (exact in float: 12 significant bits), and the floats
  // just below and above it, for both signs.
  for (size_t i = 0; i + 1 < c.value.size(); ++i) {
    const float mid = static_cast<float>((c.value[i] + c.value[i + 1]) / 2);
    REQUIRE(double{mid} == (c.value[i] + c.value[i + 1]) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
      for (float signed_x : {x, -x}) {
        INFO("x = " << signed_x);
        REQUIRE(mha::f16::encode(signed_x) == encode_by_definition(signed_x, c));
      }
    }
  }
  // Ties go to the even code: 2^-25 (half of the smallest subnormal) to 0, 3 * 2^-25 to 2^-23, 65520 to inf.
  CHECK(mha::f16::encode(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(mha::f16::encode(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(mha::f16::encode(3 * std::ldexp(1.0f, -25)) == 0x0002);
  CHECK(mha::f16::encode(65504.0f) == 0x7bff);
  CHECK(mha::f16::encode(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(mha::f16::encode(65520.0f) == 0x7c00);
  CHECK(mha::f16::encode(-1e30f) == 0xfc00);
  CHECK(mha::f16::encode(kInf) == 0x7c00);
  CHECK(mha::f16::encode(-kInf) == 0xfc00);
  CHECK(mha::f16::encode(-0.0f) == 0x8000);
  CHECK(mha::f16::encode(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(mha::f16::encode(-std::numeric_limits<float>::denorm_min()) == 0x8000);
  CHECK(mha::f16::encode(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie between 1 and 1 + 2^-10: even
  CHECK(mha::f16::encode(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(mha::f16::encode(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)) ==
        0x0400);  // tie: largest subnormal (odd) -> min normal
}

TEST_CASE("f16: encode of random float bit patterns equals the definition", "[f16]") {
  const Candidates c;
  std::mt19937 rng(1601);
  for (int n = 0; n < 400000; ++n) {
    const float x = bits_float(rng());
    INFO("bits 0x" << std::hex << float_bits(x));
    REQUIRE(mha::f16::encode(x) == encode_by_definition(x, c));
  }
}

#if MHA_F16_SIMD
TEST_CASE("f16 SIMD: widening every half equals the scalar decode, scaled by 2^-112 or not", "[f16][simd]") {
  for (uint32_t first = 0; first <= 0xffff; first += 8) {
    uint16_t halves[8];
    float out[8];
    bool has_special = false;
    for (int e = 0; e < 8; ++e) {
      halves[e] = static_cast<uint16_t>(first + e);
      has_special |= mha::f16::is_special(halves[e]);
    }
    INFO("halves from 0x" << std::hex << first);
    simd_decode8<true, false>(halves, out);
    for (int e = 0; e < 8; ++e) REQUIRE(same_float(out[e], mha::f16::decode(halves[e])));
    simd_decode8<true, true>(halves, out);
    for (int e = 0; e < 8; ++e) REQUIRE(same_float(out[e], mha::f16::decode(halves[e])));
    if (!has_special) {  // the variants without the inf/NaN fix-up are exact wherever there is none
      simd_decode8<false, false>(halves, out);
      for (int e = 0; e < 8; ++e) REQUIRE(same_float(out[e], mha::f16::decode(halves[e])));
      simd_decode8<false, true>(halves, out);
      for (int e = 0; e < 8; ++e) REQUIRE(same_float(out[e], mha::f16::decode(halves[e])));
    }
  }
}

TEST_CASE("f16 SIMD: encode equals the scalar encode on random bit patterns and every midpoint; flags inf/NaN",
          "[f16][simd]") {
  std::mt19937 rng(1602);
  std::vector<float> inputs;
  for (int n = 0; n < 200000; ++n) inputs.push_back(bits_float(rng()));
  const Candidates c;
  for (size_t i = 0; i + 1 < c.value.size(); ++i) {
    const float mid = static_cast<float>((c.value[i] + c.value[i + 1]) / 2);
    inputs.insert(inputs.end(), {mid, -mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)});
  }
  while (inputs.size() % 8 != 0) inputs.push_back(0.0f);
  for (size_t i = 0; i < inputs.size(); i += 8) {
    uint16_t halves[8];
    bool flagged = false, expect_flag = false;
    simd_encode8(&inputs[i], halves, &flagged);
    for (int e = 0; e < 8; ++e) {
      INFO("x = " << inputs[i + e] << " bits 0x" << std::hex << float_bits(inputs[i + e]));
      REQUIRE(halves[e] == mha::f16::encode(inputs[i + e]));
      expect_flag |= mha::f16::is_special(halves[e]);
    }
    REQUIRE(flagged == expect_flag);
  }
  // Two finite halves whose exponents OR to all ones (2: 10000, 1: 01111) are not flagged.
  const float pair[8] = {2.0f, 0, 0, 0, 1.0f, 0, 0, 0};
  uint16_t halves[8];
  bool flagged = true;
  simd_encode8(pair, halves, &flagged);
  CHECK_FALSE(flagged);
  const float one_inf[8] = {0, 0, 0, 0, 0, 0, 0, 1e6f};
  simd_encode8(one_inf, halves, &flagged);
  CHECK(flagged);
}
#endif

TEST_CASE(
    "f16 tensors: widen_halves and narrow_floats equal decode and encode, in place and out of place, every length",
    "[f16]") {
  // Every binary16 code, then floats around every rounding boundary and the specials.
  std::vector<uint16_t> codes(65536);
  for (uint32_t h = 0; h < 65536; ++h) codes[h] = static_cast<uint16_t>(h);
  std::vector<float> floats;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int i = 0; i < 20000; ++i) floats.push_back(std::ldexp(unit(rng), int(rng() % 60) - 30));
  for (float x : {0.0f, -0.0f, 65504.0f, 65520.0f, -65520.0f, 1e-8f, 2.98e-8f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    floats.push_back(x);
  for (const size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(9), size_t(23), codes.size()}) {
    INFO("n = " << n);
    std::vector<float> out(n);
    mha::widen_halves(codes.data(), out.data(), int64_t(n));
    for (size_t i = 0; i < n; ++i) {
      const float want = mha::f16::decode(codes[i]);
      REQUIRE((std::memcmp(&out[i], &want, 4) == 0 || (std::isnan(out[i]) && std::isnan(want))));
    }
    // In place: the halves in the upper half of the float slot, as web/src/staging.ts stages them.
    std::vector<float> slot(n + 1);
    std::memcpy(reinterpret_cast<char*>(slot.data()) + 2 * n, codes.data(), 2 * n);
    mha::widen_halves(reinterpret_cast<const uint16_t*>(reinterpret_cast<char*>(slot.data()) + 2 * n), slot.data(),
                      int64_t(n));
    for (size_t i = 0; i < n; ++i) REQUIRE((std::memcmp(&slot[i], &out[i], 4) == 0));
  }
  for (const size_t n : {size_t(1), size_t(8), size_t(13), floats.size()}) {
    INFO("n = " << n);
    std::vector<uint16_t> halves(n);
    mha::narrow_floats(floats.data(), halves.data(), int64_t(n));
    for (size_t i = 0; i < n; ++i) REQUIRE(halves[i] == mha::f16::encode(floats[i]));
    std::vector<float> in_place(floats.begin(), floats.begin() + long(n));
    mha::narrow_floats(in_place.data(), reinterpret_cast<uint16_t*>(in_place.data()), int64_t(n));
    REQUIRE(std::memcmp(in_place.data(), halves.data(), 2 * n) == 0);
  }
}
