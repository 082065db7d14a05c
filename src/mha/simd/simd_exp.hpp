// Vectorized 2^x for the attention softmax (xsimd; SIMD128 when compiled with Emscripten). The kernel
// folds log2(e) into the QK^T scale, so its scores are in log2 units and exp(s - m) is 2^(s' - m').
//
//   2^x = 2^n * 2^r,  n = round(x),  r = x - n in [-1/2, 1/2] (exact)
// 2^r is the Cephes exp2f polynomial, about 1 ulp on the reduced range; 2^n is built directly in the
// exponent bits. No FMA in SIMD128, so the Horner steps are mul + add, which native SSE4.2 matches bit for
// bit; the relaxed variant (MHA_VARIANT_RELAXED) makes them one relaxed_madd each (madd, simd_ops.hpp).
#pragma once

#include <cstdint>

#include <xsimd/xsimd.hpp>

#include "mha/simd/simd_ops.hpp"  // VecF, VecI, pin_in_register, pseudo_max, madd

namespace mha {
namespace simd {
inline namespace MHA_SIMD_VARIANT {

// 2^x for x <= 0 (or NaN): 2^r = 1 + r*P5(r). 2^0 = 1 exactly (so a rescale by 2^(m - m) leaves the
// accumulators untouched), NaN gives NaN (a NaN score must poison its row, as in the reference).
// Small results: x is first clamped to kExp2Floor (one pseudo_max, which keeps NaN), where n = -127
// makes the built power of two exactly +0; so every x < -126.5 (including -inf) gives +0, and
// [-126.5, -126) gives the correctly scaled, subnormal value. No overflow test: the softmax only calls
// it with x <= 0 (or NaN).
constexpr float kExp2Floor = -127.0f;
constexpr float kExp2Accurate = -126.0f;  // accurate (a few ulp) on [kExp2Accurate, 0]

struct Exp2Constants {
  // 1.5 * 2^23: adding it rounds to the nearest integer and leaves that integer in the low mantissa bits.
  VecF round_magic = VecF(12582912.0f);
  VecF c0 = VecF(1.535336188319500e-4f), c1 = VecF(1.339887440266574e-3f), c2 = VecF(9.618437357674640e-3f);
  VecF c3 = VecF(5.550332471162809e-2f), c4 = VecF(2.402264791363012e-1f), c5 = VecF(6.931472028550421e-1f);
  VecF one = VecF(1.0f), floor = VecF(kExp2Floor);
  VecI bias = VecI(127);

  Exp2Constants() {
    pin_in_register(round_magic), pin_in_register(c0), pin_in_register(c1), pin_in_register(c2);
    pin_in_register(c3), pin_in_register(c4), pin_in_register(c5), pin_in_register(one);
    pin_in_register(floor);
  }
};

inline VecF exp2_nonpositive(VecF x_in, const Exp2Constants& k) {
  const VecF x = pseudo_max(x_in, k.floor);
  const VecF t = x + k.round_magic;
  const VecF n = t - k.round_magic;
  const VecF r = x - n;
  VecF p = madd(k.c0, r, k.c1);
  p = madd(p, r, k.c2);
  p = madd(p, r, k.c3);
  p = madd(p, r, k.c4);
  p = madd(p, r, k.c5);
  p = madd(p, r, k.one);
  // n >= -127, so (n + 127) << 23 is a float's bits: +0 for n = -127, else the normal 2^n.
  const VecI pow2_bits = (xsimd::bitwise_cast<VecI>(t) + k.bias) << 23;
  return p * xsimd::bitwise_cast<VecF>(pow2_bits);
}

}  // namespace MHA_SIMD_VARIANT
}  // namespace simd
}  // namespace mha
