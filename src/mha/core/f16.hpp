// IEEE binary16 <-> float32 for the float16 KV cache (docs/spec.md Part 3). Encoding rounds to nearest,
// ties to even; values from 65520 up overflow to +-inf, as IEEE rounding does; NaN stays NaN (quiet, sign
// kept). Decoding is exact: every half is a float32 value.
//
// The scalar functions are the definition the SIMD ones are tested against (tests/cpp/test_f16.cpp, which
// checks them in turn against a definition by value: ldexp and a nearest-half search).
//
// SIMD widening (8 halves -> 8 floats) costs 5 integer operations: an arithmetic shift and a mask put
// sign, exponent and the top 7 mantissa bits of each half into the high 16 bits of its float, a shift puts
// the 3 low mantissa bits into the low 16 bits, and two interleaves pair them up. The float is then 2^-112
// times the half's value (normal or subnormal); callers that can fold 2^112 into another operand skip
// the multiply that would fix it.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__SSE4_1__) || defined(__wasm_simd128__)
#define MHA_F16_SIMD 1
#include <xsimd/xsimd.hpp>

#include "mha/simd/simd_ops.hpp"  // pin_in_register, narrow_u16
#endif

namespace mha {
namespace f16 {

inline uint32_t float_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

inline float bits_float(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// Bit patterns of the float32 constants the conversions use.
constexpr uint32_t kF32Half = 0x3f000000u;           // 0.5f
constexpr uint32_t kF32Pow2_112 = 0x77800000u;       // 2^112: half exponent bias 15 -> float bias 127
constexpr uint32_t kF32Overflow = 0x47800000u;       // 65536.0f: at and above, the half is +-inf (or NaN)
constexpr uint32_t kF32MinNormalHalf = 0x38800000u;  // 2^-14: below, the half is subnormal or zero
constexpr uint32_t kF32Inf = 0x7f800000u;
// Moves a float exponent to a half exponent ((15 - 127) << 23, modulo 2^32) and adds the rounding
// increment 0xfff (half an ulp of the half, minus one; the missing one is the mantissa's odd bit).
constexpr uint32_t kRebiasAndRound = 0xc8000fffu;
constexpr uint16_t kHalfInf = 0x7c00;
constexpr uint16_t kHalfQuietNaN = 0x7e00;

// float32 -> binary16 bits, round to nearest even.
inline uint16_t encode(float x) {
  uint32_t f = float_bits(x);
  const uint32_t sign = (f >> 16) & 0x8000u;
  f &= 0x7fffffffu;
  uint32_t h;
  if (f >= kF32Overflow) {
    h = f > kF32Inf ? kHalfQuietNaN : kHalfInf;
  } else if (f < kF32MinNormalHalf) {
    // |x| + 0.5 lies in [0.5, 1), where a float's last mantissa bit is worth 2^-24, the unit of a
    // subnormal half: the float addition itself rounds |x| to the nearest half, ties to even.
    h = float_bits(bits_float(f) + 0.5f) - kF32Half;
  } else {
    const uint32_t odd = (f >> 13) & 1u;    // the half's last mantissa bit: ties go to even
    h = (f + kRebiasAndRound + odd) >> 13;  // a carry out of the mantissa bumps the exponent (65520 -> inf)
  }
  return static_cast<uint16_t>(h | sign);
}

// binary16 bits -> float32, exact.
inline float decode(uint16_t h) {
  // The half's bits 14..0 placed at float bits 27..13 and its sign at bit 31 make a float 2^-112 times
  // the half's value, normal or subnormal; exponent 31 (inf, NaN) becomes the float exponent 255.
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t magnitude = uint32_t{h & 0x7fffu} << 13;
  if (magnitude >= (uint32_t{kHalfInf} << 13)) return bits_float(sign | kF32Inf | magnitude);
  return bits_float(sign | magnitude) * bits_float(kF32Pow2_112);
}

// True for the halves that are inf or NaN (exponent 31).
inline bool is_special(uint16_t h) { return (h & kHalfInf) == kHalfInf; }

// 2^112 as a float: what widened halves lack (kScaled loads), and what callers fold into another operand.
constexpr float kWidenScale = 0x1p112f;

#if MHA_F16_SIMD
namespace simd {

using mha::simd::VecF;
using mha::simd::VecI;
using mha::simd::VecI16;

struct Constants {
  VecI keep_sign_and_high = VecI(static_cast<int32_t>(0x8fff8fffu));  // s000 eeeee mmmmmmm, per 16 bits
  VecF pow2_112 = VecF(kWidenScale);
  VecI exponent31 = VecI(0x0f800000);  // a half's exponent 31 once widened
  VecI f32_inf = VecI(static_cast<int32_t>(kF32Inf));
  Constants() {
    mha::simd::pin_in_register(keep_sign_and_high), mha::simd::pin_in_register(pow2_112);
    mha::simd::pin_in_register(exponent31), mha::simd::pin_in_register(f32_inf);
  }
};

// Widened bits (sign at 31, the half's bits 14..0 at 27..13) -> 4 floats. kSpecials: exponent 31 becomes
// inf/NaN (without it, inf and NaN halves give finite garbage: callers that know the data holds none skip
// those 4 operations). kScaled: 2^-112 times the value, no multiply (inf/NaN stay inf/NaN).
template <bool kSpecials, bool kScaled>
inline VecF widen(VecI bits, const Constants& c) {
  const VecF value = kScaled ? xsimd::bitwise_cast<VecF>(bits) : xsimd::bitwise_cast<VecF>(bits) * c.pow2_112;
  if (!kSpecials) return value;
  const auto special = (bits & c.exponent31) == c.exponent31;
  return xsimd::bitwise_cast<VecF>(xsimd::select(special, bits | c.f32_inf, xsimd::bitwise_cast<VecI>(value)));
}

// 8 halves (16-byte aligned) -> elements 0..3 in lo, 4..7 in hi.
template <bool kSpecials, bool kScaled>
inline void load8(const uint16_t* halves, VecF& lo, VecF& hi, const Constants& c) {
  const VecI16 x = VecI16::load_aligned(reinterpret_cast<const int16_t*>(halves));
  const VecI16 high = (x >> 3) & xsimd::bitwise_cast<VecI16>(c.keep_sign_and_high);  // arithmetic shift
  const VecI16 low = x << 13;
  lo = widen<kSpecials, kScaled>(xsimd::bitwise_cast<VecI>(xsimd::zip_lo(low, high)), c);
  hi = widen<kSpecials, kScaled>(xsimd::bitwise_cast<VecI>(xsimd::zip_hi(low, high)), c);
}

// 4 floats -> 4 half codes in the low 16 bits of 4 lanes, round to nearest even (as encode()).
inline VecI narrow(VecF x) {
  const VecI f = xsimd::bitwise_cast<VecI>(x);
  const VecI sign = (f >> 16) & VecI(0x8000);
  const VecI a = f & VecI(0x7fffffff);
  const VecI inf_or_nan = xsimd::select(a > VecI(static_cast<int32_t>(kF32Inf)), VecI(kHalfQuietNaN), VecI(kHalfInf));
  const VecI subnormal =
      xsimd::bitwise_cast<VecI>(xsimd::bitwise_cast<VecF>(a) + VecF(0.5f)) - VecI(static_cast<int32_t>(kF32Half));
  const VecI normal = (a + VecI(static_cast<int32_t>(kRebiasAndRound)) + ((a >> 13) & VecI(1))) >> 13;
  const VecI h = xsimd::select(a >= VecI(static_cast<int32_t>(kF32Overflow)), inf_or_nan,
                               xsimd::select(a < VecI(static_cast<int32_t>(kF32MinNormalHalf)), subnormal, normal));
  return h | sign;
}

// 8 floats (elements 0..3 in lo, 4..7 in hi) -> 8 halves, 16-byte aligned. Returns true when one of them
// is inf or NaN.
inline bool store8(VecF lo, VecF hi, uint16_t* halves) {
  const VecI a = narrow(lo), b = narrow(hi);
  mha::simd::narrow_u16(a, b).store_aligned(halves);  // the codes fit 16 bits: no lane is clamped
  const VecI inf(kHalfInf);
  return xsimd::any(((a & inf) == inf) || ((b & inf) == inf));
}

}  // namespace simd
#endif

}  // namespace f16
}  // namespace mha
