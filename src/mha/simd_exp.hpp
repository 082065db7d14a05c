// Vectorized float32 exp for the attention softmax (xsimd; SIMD128 when compiled with Emscripten).
//
//   exp(x) = 2^n * exp(r),  n = round(x / ln2),  r = x - n*ln2 in [-ln2/2, ln2/2]
// r is formed with a Cody-Waite split of ln2 (ln2_hi has 9 significant bits, so n*ln2_hi is exact for
// every n this function can produce); exp(r) is the Cephes degree-7 polynomial 1 + r + r^2*P5(r), about
// 1 ulp on the reduced range; 2^n is built directly in the exponent bits. No FMA: WASM SIMD128 has none,
// so the Horner steps are mul + add, which native SSE4.2 matches bit for bit.
//
// Special values, in the order the kernel relies on them:
//   exp(-inf) = +0 exactly, and every x < kExpUnderflow flushes to +0 (no denormal results);
//   exp(0) = 1 exactly (so a rescale by exp(m - m) leaves the accumulators untouched);
//   NaN in gives NaN out (a NaN score must poison its row, as in the reference);
//   x > kExpOverflow gives +inf.
// Accurate (a few ulp) on [kExpUnderflow, kExpOverflow].
#pragma once

#include <cstdint>

#include <xsimd/xsimd.hpp>

namespace mha {
namespace simd {

using VecF = xsimd::batch<float>;
using VecI = xsimd::batch<int32_t>;

// Below this the result is smaller than FLT_MIN: it is flushed to +0 (including -inf).
constexpr float kExpUnderflow = -87.3f;
// Above this 2^n no longer fits a normal float exponent: the result is +inf (true overflow is at 88.72).
constexpr float kExpOverflow = 88.37f;

inline VecF exp(VecF x) {
  const VecF log2e(1.44269504088896341f);
  // 1.5 * 2^23: adding it rounds to the nearest integer and leaves that integer in the low mantissa bits.
  const VecF round_magic(12582912.0f);
  const VecF ln2_hi(0.693359375f);
  const VecF ln2_lo(-2.12194440e-4f);

  const VecF t = x * log2e + round_magic;
  const VecF n = t - round_magic;
  // Cody-Waite: two exact-ish steps keep r accurate although n*ln2 is not representable.
  VecF r = x - n * ln2_hi;
  r = r - n * ln2_lo;

  VecF p(1.9875691500e-4f);
  p = p * r + VecF(1.3981999507e-3f);
  p = p * r + VecF(8.3334519073e-3f);
  p = p * r + VecF(4.1665795894e-2f);
  p = p * r + VecF(1.6666665459e-1f);
  p = p * r + VecF(5.0000001201e-1f);
  const VecF r2 = r * r;
  p = p * r2 + r + VecF(1.0f);

  // 2^n: the integer n sits in the low bits of t; (bits(t) + 127) << 23 is its biased exponent (the
  // magic's own high bits are shifted out).
  const VecI pow2_bits = (xsimd::bitwise_cast<VecI>(t) + VecI(127)) << 23;
  VecF result = p * xsimd::bitwise_cast<VecF>(pow2_bits);

  // Out-of-range inputs produce garbage above (NaN for -inf); comparisons are false for NaN, so a NaN
  // input keeps its NaN result.
  result = xsimd::select(x < VecF(kExpUnderflow), VecF(0.0f), result);
  result = xsimd::select(x > VecF(kExpOverflow), VecF(__builtin_huge_valf()), result);
  return result;
}

}  // namespace simd
}  // namespace mha
