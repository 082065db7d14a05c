// IEEE binary16 <-> float32 for the float16 KV cache (docs/spec.md Part 3). Encoding rounds to nearest,
// ties to even; values from 65520 up overflow to +-inf, as IEEE rounding does; NaN stays NaN (quiet, sign
// kept). Decoding is exact: every half is a float32 value.
//
// The scalar functions are the definition the SIMD ones are tested against (tests/cpp/test_f16.cpp, which
// checks them in turn against a definition by value: ldexp and a nearest-half search).
//
// Storage order (the SIMD part): the cache stores every group of 8 consecutive halves in the order
// 0 4 1 5 2 6 3 7. Seen as four 32-bit lanes, lane i then holds element i in its low half and element
// i + 4 in its high half, so a shift (low halves) or a mask (high halves) puts 4 halves at the top of
// 4 lanes, and 3 integer operations and 1 multiply turn them into 4 floats: no shuffles.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__SSE4_1__) || defined(__wasm_simd128__)
#define MHA_F16_SIMD 1
#include <xsimd/xsimd.hpp>

#include "mha/simd_exp.hpp"  // pin_in_register
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
constexpr uint32_t kF32Half = 0x3f000000u;            // 0.5f
constexpr uint32_t kF32Pow2_112 = 0x77800000u;        // 2^112: half exponent bias 15 -> float bias 127
constexpr uint32_t kF32Overflow = 0x47800000u;        // 65536.0f: at and above, the half is +-inf (or NaN)
constexpr uint32_t kF32MinNormalHalf = 0x38800000u;   // 2^-14: below, the half is subnormal or zero
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
    const uint32_t odd = (f >> 13) & 1u;  // the half's last mantissa bit: ties go to even
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

// Position of element e (0..7) of a group of 8 in the cache's storage order (see the top).
constexpr int32_t stored_position(int32_t e) { return e < 4 ? 2 * e : 2 * (e - 4) + 1; }

#if MHA_F16_SIMD
namespace simd {

using VecF = xsimd::batch<float>;
using VecI = xsimd::batch<int32_t>;

struct Constants {
  VecI high_halves = VecI(static_cast<int32_t>(0xffff0000u));
  VecI keep_sign_and_magnitude = VecI(static_cast<int32_t>(0x8fffffffu));
  VecF pow2_112 = VecF(bits_float(kF32Pow2_112));
  VecI exponent31 = VecI(0x0f800000);  // a half's exponent 31 after the shift of widen()
  VecI f32_inf = VecI(static_cast<int32_t>(kF32Inf));
  Constants() {
    mha::simd::pin_in_register(high_halves), mha::simd::pin_in_register(keep_sign_and_magnitude);
    mha::simd::pin_in_register(pow2_112), mha::simd::pin_in_register(exponent31), mha::simd::pin_in_register(f32_inf);
  }
};

// 4 halves at the top of 4 lanes (low 16 bits zero) -> 4 floats. kSpecials: also map exponent 31 to
// inf/NaN; without it, inf and NaN halves decode to finite garbage (callers that know the data holds
// none skip those 4 operations).
template <bool kSpecials>
inline VecF widen(VecI top, const Constants& c) {
  // Arithmetic shift by 3 puts bits 14..0 at 27..13 and copies the sign into 31..28; the mask clears
  // 30..28 again.
  const VecI bits = (top >> 3) & c.keep_sign_and_magnitude;
  const VecF value = xsimd::bitwise_cast<VecF>(bits) * c.pow2_112;
  if (!kSpecials) return value;
  const auto special = (bits & c.exponent31) == c.exponent31;
  return xsimd::bitwise_cast<VecF>(xsimd::select(special, bits | c.f32_inf, xsimd::bitwise_cast<VecI>(value)));
}

// 8 halves in storage order (16 bytes, 16-byte aligned) -> elements 0..3 in lo, 4..7 in hi.
template <bool kSpecials>
inline void load8(const uint16_t* stored, VecF& lo, VecF& hi, const Constants& c) {
  const VecI x = VecI::load_aligned(reinterpret_cast<const int32_t*>(stored));
  lo = widen<kSpecials>(x << 16, c);
  hi = widen<kSpecials>(x & c.high_halves, c);
}

// 4 floats -> 4 half codes in the low 16 bits of 4 lanes, round to nearest even (as encode()).
inline VecI narrow(VecF x) {
  const VecI f = xsimd::bitwise_cast<VecI>(x);
  const VecI sign = (f >> 16) & VecI(0x8000);
  const VecI a = f & VecI(0x7fffffff);
  const VecI inf_or_nan = xsimd::select(a > VecI(static_cast<int32_t>(kF32Inf)), VecI(kHalfQuietNaN), VecI(kHalfInf));
  const VecI subnormal = xsimd::bitwise_cast<VecI>(xsimd::bitwise_cast<VecF>(a) + VecF(0.5f)) - VecI(static_cast<int32_t>(kF32Half));
  const VecI normal = (a + VecI(static_cast<int32_t>(kRebiasAndRound)) + ((a >> 13) & VecI(1))) >> 13;
  const VecI h = xsimd::select(a >= VecI(static_cast<int32_t>(kF32Overflow)), inf_or_nan,
                               xsimd::select(a < VecI(static_cast<int32_t>(kF32MinNormalHalf)), subnormal, normal));
  return h | sign;
}

// 8 floats (elements 0..3 in lo, 4..7 in hi) -> 8 halves in storage order, 16-byte aligned. Returns true
// when one of them is inf or NaN.
inline bool store8(VecF lo, VecF hi, uint16_t* stored) {
  const VecI a = narrow(lo), b = narrow(hi);
  (a | (b << 16)).store_aligned(reinterpret_cast<int32_t*>(stored));
  const VecI inf(kHalfInf);
  return xsimd::any(((a & inf) == inf) || ((b & inf) == inf));
}

}  // namespace simd
#endif

}  // namespace f16
}  // namespace mha
