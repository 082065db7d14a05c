// The simd128 variant's vectorized tanh (src/mha/simd/simd_tanh.hpp, the softcap of the score epilogue)
// against std::tanh in double rounded to float, over the whole float range.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

#include "mha/core/f16.hpp"  // float_bits, bits_float
#include "mha/simd/simd_tanh.hpp"

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

using mha::f16::bits_float;
using mha::f16::float_bits;

// Distance in units in the last place between two finite floats of the same sign (or zero).
uint32_t ulp_distance(float a, float b) {
  const int64_t ia = float_bits(a) & 0x7fffffffu, ib = float_bits(b) & 0x7fffffffu;
  return static_cast<uint32_t>(ia > ib ? ia - ib : ib - ia);
}

}  // namespace

TEST_CASE("simd tanh: within 2 ulp of the correctly rounded tanh on every 64th positive float; odd; NaN kept",
          "[tanh]") {
  const mha::simd::TanhConstants k;
  uint32_t worst = 0;
  float worst_x = 0.0f;
  alignas(16) float x[4], y[4], y_neg[4];
  // Positive finite floats are the bit patterns (0, 0x7f800000); a stride of 64 visits 33 million of them,
  // every binade from the subnormals to FLT_MAX, with the low mantissa bits varied by an odd offset.
  for (uint32_t bits = 1; bits < 0x7f800000u - 4 * 64; bits += 4 * 64) {
    for (int lane = 0; lane < 4; ++lane) x[lane] = bits_float(bits + lane * 64 + (bits >> 7) % 61);
    mha::simd::tanh(mha::simd::VecF::load_aligned(x), k).store_aligned(y);
    mha::simd::tanh(-mha::simd::VecF::load_aligned(x), k).store_aligned(y_neg);
    for (int lane = 0; lane < 4; ++lane) {
      const float expected = static_cast<float>(std::tanh(static_cast<double>(x[lane])));
      const uint32_t d = ulp_distance(y[lane], expected);
      if (d > worst) {
        worst = d;
        worst_x = x[lane];
      }
      if (float_bits(y_neg[lane]) != (float_bits(y[lane]) ^ 0x80000000u)) {
        INFO("x = " << x[lane] << ": tanh(-x) = " << y_neg[lane] << ", tanh(x) = " << y[lane]);
        FAIL("tanh is not odd");
      }
      if (!(y[lane] >= 0.0f && y[lane] <= 1.0f)) {
        INFO("x = " << x[lane] << ": tanh " << y[lane]);
        FAIL("tanh outside [0, 1] for positive x");
      }
    }
  }
  WARN("simd tanh: worst " << worst << " ulp at x = " << worst_x);
  REQUIRE(worst <= 2);

  alignas(16) const float special[8] = {
      0.0f,  -0.0f, kInf, -kInf, kNaN, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
      0.625f};
  alignas(16) float out[8];
  mha::simd::tanh(mha::simd::VecF::load_aligned(special), k).store_aligned(out);
  mha::simd::tanh(mha::simd::VecF::load_aligned(special + 4), k).store_aligned(out + 4);
  CHECK(float_bits(out[0]) == float_bits(0.0f));
  CHECK(float_bits(out[1]) == float_bits(-0.0f));
  CHECK(out[2] == 1.0f);
  CHECK(out[3] == -1.0f);
  CHECK(std::isnan(out[4]));
  CHECK(out[5] == std::numeric_limits<float>::denorm_min());  // tanh(x) = x for tiny x
  CHECK(out[6] == 1.0f);
  CHECK(ulp_distance(out[7], static_cast<float>(std::tanh(0.625))) <= 2);
  // Around the branch point both formulas must agree with tanh.
  for (float xs = 0.6f; xs < 0.65f; xs = std::nextafter(xs, 1.0f)) {
    const float t = mha::simd::tanh(mha::simd::VecF(xs), k).get(0);
    REQUIRE(ulp_distance(t, static_cast<float>(std::tanh(double{xs}))) <= 2);
  }
}
