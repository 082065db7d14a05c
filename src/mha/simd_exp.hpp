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
#if defined(__wasm_simd128__)
#include <wasm_simd128.h>
#endif

namespace mha {
namespace simd {

using VecF = xsimd::batch<float>;
using VecI = xsimd::batch<int32_t>;

// Below this the result is smaller than FLT_MIN: it is flushed to +0 (including -inf).
constexpr float kExpUnderflow = -87.3f;
// Above this 2^n no longer fits a normal float exponent: the result is +inf (true overflow is at 88.72).
constexpr float kExpOverflow = 88.37f;

// The constants of exp, held in registers. WebAssembly has no constant-pool operands: V8 rebuilds every
// v128.const with 3 instructions each time it is used, and LLVM rematerializes constants inside loops.
// Building them once per loop and hiding their values from LLVM (an empty asm) keeps them in locals.
struct ExpConstants {
  VecF log2e = VecF(1.44269504088896341f);
  // 1.5 * 2^23: adding it rounds to the nearest integer and leaves that integer in the low mantissa bits.
  VecF round_magic = VecF(12582912.0f);
  VecF ln2_hi = VecF(0.693359375f);
  VecF ln2_lo = VecF(-2.12194440e-4f);
  VecF c0 = VecF(1.9875691500e-4f), c1 = VecF(1.3981999507e-3f), c2 = VecF(8.3334519073e-3f);
  VecF c3 = VecF(4.1665795894e-2f), c4 = VecF(1.6666665459e-1f), c5 = VecF(5.0000001201e-1f);
  VecF one = VecF(1.0f), underflow = VecF(kExpUnderflow), overflow = VecF(kExpOverflow);
  VecF inf = VecF(__builtin_huge_valf());
  VecI bias = VecI(127);

  ExpConstants() {
    pin(log2e), pin(round_magic), pin(ln2_hi), pin(ln2_lo), pin(c0), pin(c1), pin(c2), pin(c3), pin(c4), pin(c5);
    pin(one), pin(underflow), pin(overflow), pin(inf);
  }
  template <typename V>
  static void pin(V& v) {
#if defined(__wasm_simd128__)
    auto r = v.data;
    __asm__("" : "+r"(r));
    v = V(r);
#else
    (void)v;
#endif
  }
};

// kCheckOverflow = false drops the overflow test, for callers whose x is known to be <= 0 (or NaN).
template <bool kCheckOverflow = true>
inline VecF exp(VecF x, const ExpConstants& k) {
  const VecF t = x * k.log2e + k.round_magic;
  const VecF n = t - k.round_magic;
  // Cody-Waite: two steps keep r accurate although n*ln2 is not representable.
  VecF r = x - n * k.ln2_hi;
  r = r - n * k.ln2_lo;

  VecF p = k.c0 * r + k.c1;
  p = p * r + k.c2;
  p = p * r + k.c3;
  p = p * r + k.c4;
  p = p * r + k.c5;
  const VecF r2 = r * r;
  p = p * r2 + r + k.one;

  // 2^n: the integer n sits in the low bits of t; (bits(t) + 127) << 23 is its biased exponent (the
  // magic's own high bits are shifted out).
  const VecI pow2_bits = (xsimd::bitwise_cast<VecI>(t) + k.bias) << 23;
  VecF result = p * xsimd::bitwise_cast<VecF>(pow2_bits);

  // Out-of-range inputs produce garbage above (NaN for -inf); comparisons are false for NaN, so a NaN
  // input keeps its NaN result.
  result = VecF(_mm_andnot_ps((x < k.underflow).data, result.data));
  if (kCheckOverflow) result = xsimd::select(x > k.overflow, k.inf, result);
  return result;
}

// max(a, b) as `a < b ? b : a` (WebAssembly's f32x4.pmax): a NaN in b is dropped, a NaN in a is kept.
// V8 emits one maxps for it, where f32x4.max (and Emscripten's _mm_max_ps) cost a compare and a blend
// for IEEE NaN semantics. SSE's maxps(b, a) is the same function, so native and wasm results agree.
inline VecF pseudo_max(VecF a, VecF b) {
#if defined(__wasm_simd128__)
  return VecF(__m128(wasm_f32x4_pmax(v128_t(a.data), v128_t(b.data))));
#else
  return VecF(_mm_max_ps(b.data, a.data));
#endif
}

// 2^x for the softmax, whose scores are pre-multiplied by log2(e) (folded into the QK^T scale), so no
// Cody-Waite reduction is needed: n = round(x), r = x - n is exact, 2^r = 1 + r*P5(r) (Cephes exp2f
// polynomial on [-1/2, 1/2]). Fewer constants and operations than exp. 2^0 = 1 exactly, NaN gives NaN.
// Small results: x is first clamped to kExp2Floor (one pseudo_max, which keeps NaN), where n = -127
// makes the built power of two exactly +0; so every x < -126.5 (including -inf) gives +0, and
// [-126.5, -126) gives the correctly scaled, subnormal value. No overflow test: the softmax only calls
// it with x <= 0 (or NaN).
constexpr float kExp2Floor = -127.0f;
constexpr float kExp2Accurate = -126.0f;  // accurate (a few ulp) on [kExp2Accurate, 0]

struct Exp2Constants {
  VecF round_magic = VecF(12582912.0f);
  VecF c0 = VecF(1.535336188319500e-4f), c1 = VecF(1.339887440266574e-3f), c2 = VecF(9.618437357674640e-3f);
  VecF c3 = VecF(5.550332471162809e-2f), c4 = VecF(2.402264791363012e-1f), c5 = VecF(6.931472028550421e-1f);
  VecF one = VecF(1.0f), floor = VecF(kExp2Floor);
  VecI bias = VecI(127);

  Exp2Constants() {
    ExpConstants::pin(round_magic), ExpConstants::pin(c0), ExpConstants::pin(c1), ExpConstants::pin(c2);
    ExpConstants::pin(c3), ExpConstants::pin(c4), ExpConstants::pin(c5), ExpConstants::pin(one);
    ExpConstants::pin(floor);
  }
};

inline VecF exp2_nonpositive(VecF x_in, const Exp2Constants& k) {
  const VecF x = pseudo_max(x_in, k.floor);
  const VecF t = x + k.round_magic;
  const VecF n = t - k.round_magic;
  const VecF r = x - n;
  VecF p = k.c0 * r + k.c1;
  p = p * r + k.c2;
  p = p * r + k.c3;
  p = p * r + k.c4;
  p = p * r + k.c5;
  p = p * r + k.one;
  // n >= -127, so (n + 127) << 23 is a float's bits: +0 for n = -127, else the normal 2^n.
  const VecI pow2_bits = (xsimd::bitwise_cast<VecI>(t) + k.bias) << 23;
  return p * xsimd::bitwise_cast<VecF>(pow2_bits);
}

inline VecF exp(VecF x) {
  const ExpConstants k;
  return exp<true>(x, k);
}

}  // namespace simd
}  // namespace mha
