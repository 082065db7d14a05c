// Vectorized tanh for the logit soft-capping of the simd128 variant's score epilogue (xsimd; SIMD128 when
// compiled with Emscripten). Accurate to a few ulp over the whole float range (tests/cpp/test_tanh.cpp
// measures every 64th float against the correctly rounded double tanh):
//   |x| <  0.625: x + x^3 P(x^2), the Cephes tanhf polynomial (no cancellation near 0; tanh of a
//                 subnormal is itself);
//   |x| >= 0.625: (1 - e) / (1 + e) with e = exp(-2|x|) = 2^(-2 log2(e) |x|) <= 0.29, from the
//                 softmax's exp2 (simd_exp.hpp), so 1 - e cancels nothing; e is +0 from |x| ~ 44 on,
//                 which gives exactly +-1 (as does the float tanh from |x| ~ 9).
// Both branches are computed and one is selected per lane, then given the sign of x. NaN gives NaN. No FMA (WASM
// SIMD128 has none): mul + add, which native SSE4.2 matches bit for bit.
#pragma once

#include <xsimd/xsimd.hpp>

#include "mha/simd/simd_exp.hpp"

namespace mha {
namespace simd {

struct TanhConstants {
  VecF p0 = VecF(-5.70498872745e-3f), p1 = VecF(2.06390887954e-2f), p2 = VecF(-5.37397155531e-2f);
  VecF p3 = VecF(1.33314422036e-1f), p4 = VecF(-3.33332819422e-1f);
  VecF small = VecF(0.625f);                           // where the polynomial ends
  VecF minus_two_log2e = VecF(-2.88539008177792681f);  // -2 log2(e)
  VecF one = VecF(1.0f);
  Exp2Constants exp2;

  TanhConstants() {
    pin_in_register(p0), pin_in_register(p1), pin_in_register(p2), pin_in_register(p3), pin_in_register(p4);
    pin_in_register(small), pin_in_register(minus_two_log2e), pin_in_register(one);
  }
};

// tanh for |x| < 0.625 only (the polynomial branch; the caller has checked the range), sign of 0 aside.
inline VecF tanh_small(VecF x, const TanhConstants& k) {
  const VecF z = x * x;
  VecF p = k.p0 * z + k.p1;
  p = p * z + k.p2;
  p = p * z + k.p3;
  p = p * z + k.p4;
  return p * z * x + x;
}

inline VecF tanh(VecF x, const TanhConstants& k) {
  const VecF ax = xsimd::abs(x);
  const VecF e = exp2_nonpositive(ax * k.minus_two_log2e, k.exp2);
  const VecF large = (k.one - e) / (k.one + e);
  // The sign of x for both branches (the polynomial alone would turn -0 into +0).
  return xsimd::copysign(xsimd::select(ax < k.small, tanh_small(x, k), large), x);
}

}  // namespace simd
}  // namespace mha
