// The simd128 variant's vectorized exp2 (src/mha/simd/simd_exp.hpp; the softmax works in log2 units) against
// std::exp2, over the whole range the softmax feeds it.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "mha/simd/simd_exp.hpp"

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Distance in units in the last place, counting across zero.
uint32_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return static_cast<uint32_t>(ia > ib ? int64_t{ia} - ib : int64_t{ib} - ia);
}

}  // namespace

// MHA_SIMD_VARIANT_NAME: "simd128" here, "relaxed" where test_exp2_relaxed.cpp compiles this file again.
TEST_CASE(MHA_SIMD_VARIANT_NAME " exp2 (softmax in log2 units): accurate on [-126, 0], +0 below -126.5, NaN kept",
          "[exp]") {
  const mha::simd::Exp2Constants k;
  auto exp2_lane0 = [&k](float x) { return mha::simd::exp2_nonpositive(mha::simd::VecF(x), k).get(0); };
  uint32_t worst = 0;
  float worst_x = 0.0f;
  for (int n = 0; n <= 2000000; ++n) {
    const float x = mha::simd::kExp2Accurate * static_cast<float>(n) / 2000000.0f;
    const uint32_t d = ulp_distance(exp2_lane0(x), std::exp2(x));
    if (d > worst) {
      worst = d;
      worst_x = x;
    }
  }
  for (float x = -1e-3f; x <= 0.0f; x = std::nextafter(x, 1.0f) + 1e-9f) {
    const uint32_t d = ulp_distance(exp2_lane0(x), std::exp2(x));
    if (d > worst) {
      worst = d;
      worst_x = x;
    }
  }
  INFO("worst " << worst << " ulp at x = " << worst_x);
  REQUIRE(worst <= 3);
  REQUIRE(exp2_lane0(0.0f) == 1.0f);
  REQUIRE(exp2_lane0(-0.0f) == 1.0f);
  REQUIRE(exp2_lane0(-126.0f) == std::exp2(-126.0f));
  for (float x : {-kInf, -126.51f, -126.7f, -127.0f, -127.5f, -128.0f, -1000.0f, -std::numeric_limits<float>::max()}) {
    INFO("x = " << x);
    const float y = exp2_lane0(x);
    REQUIRE(y == 0.0f);
    REQUIRE_FALSE(std::signbit(y));
  }
  // From -126.5 to -126 the result is subnormal and correctly scaled: within a few subnormal steps.
  for (float x = -126.5f; x < -126.0f; x += 0.01f) {
    INFO("x = " << x);
    const float y = exp2_lane0(x);
    REQUIRE(y > 0.0f);
    REQUIRE(y < std::numeric_limits<float>::min());
    REQUIRE(std::fabs(double(y) - std::exp2(double(x))) <= 4 * double(std::numeric_limits<float>::denorm_min()));
  }
  REQUIRE(std::isnan(exp2_lane0(kNaN)));
  REQUIRE(std::isnan(exp2_lane0(-kNaN)));
  // Lanes are independent: -inf and NaN neighbours do not disturb an ordinary lane.
  alignas(16) float in[4] = {-kInf, kNaN, -3.25f, -0.0f};
  alignas(16) float out[4];
  mha::simd::exp2_nonpositive(mha::simd::VecF::load_aligned(in), k).store_aligned(out);
  REQUIRE(out[0] == 0.0f);
  REQUIRE(std::isnan(out[1]));
  REQUIRE(ulp_distance(out[2], std::exp2(-3.25f)) <= 3);
  REQUIRE(out[3] == 1.0f);
}
