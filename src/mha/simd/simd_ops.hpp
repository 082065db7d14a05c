// The project's one SIMD dialect: xsimd batches (its SSE4.2 backend natively; with Emscripten, the same
// backend over SIMD128), and here the few operations xsimd lacks, each one named WebAssembly instruction
// from wasm_simd128.h under __wasm_simd128__ and plain C++ with the same bits natively (where the Catch2
// suite runs; its speed does not matter). Code outside src/mha/simd writes xsimd or these, never SSE
// intrinsics: Emscripten's SSE emulation hides what an intrinsic costs (its sign-extending byte widening
// runs lane by lane, which once cost a 3.5x slowdown). scripts/lint.sh keeps them out of src/.
// In each SIMD variant's namespace, as every inline helper (simd_variant.hpp says why).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <xsimd/xsimd.hpp>
#if defined(__wasm_simd128__)
#include <wasm_simd128.h>
#endif

#include "mha/simd/simd_variant.hpp"  // MHA_SIMD_VARIANT

namespace mha {
namespace simd {
inline namespace MHA_SIMD_VARIANT {

using VecF = xsimd::batch<float>;
using VecI = xsimd::batch<int32_t>;
using VecI16 = xsimd::batch<int16_t>;
using VecU16 = xsimd::batch<uint16_t>;
using VecI8 = xsimd::batch<int8_t>;

// WebAssembly has no constant-pool operands: V8 rebuilds every v128.const with 3 instructions each time
// it is used, and LLVM rematerializes constants inside loops. Building the constants once per loop and
// hiding their values from LLVM (an empty asm) keeps them in locals.
template <typename V>
inline void pin_in_register(V& v) {
#if defined(__wasm_simd128__) && __clang_major__ >= 19
  // LLVM 19's wasm backend cannot take a v128 as an "r" operand (it crashes: "Do not know how to split
  // this operator's operand"); through memory, it costs one store and load per constant.
  auto r = v.data;
  __asm__("" : "+m"(r));
  v = V(r);
#elif defined(__wasm_simd128__)
  auto r = v.data;
  __asm__("" : "+r"(r));
  v = V(r);
#else
  (void)v;
#endif
}

#if defined(__wasm_simd128__)
// A batch's register as wasm_simd128.h's v128_t and back (a bit cast: no instruction).
template <class B>
inline v128_t to_v128(B x) {
  return v128_t(x.data);
}
template <class B>
inline B from_v128(v128_t x) {
  return B(typename B::register_type(x));
}
#endif

// max(a, b) as `a < b ? b : a` (f32x4.pmax): a NaN in b is dropped, a NaN in a is kept. V8 emits one
// maxps for it, where f32x4.max (and xsimd's max, through Emscripten's SSE emulation) cost a compare and
// a blend for IEEE NaN semantics. Natively the same select, so native and wasm results agree.
inline VecF pseudo_max(VecF a, VecF b) {
#if defined(__wasm_simd128__)
  return from_v128<VecF>(wasm_f32x4_pmax(to_v128(a), to_v128(b)));
#else
  return xsimd::select(a < b, b, a);
#endif
}

// a * b + c. The relaxed variant: f32x4.relaxed_madd, one instruction where the engine fuses it (FMA,
// rounded once: results differ from mul + add in the last bits); elsewhere mul + add, rounded twice.
inline VecF madd(VecF a, VecF b, VecF c) {
#if MHA_VARIANT_RELAXED
  return from_v128<VecF>(wasm_f32x4_relaxed_madd(to_v128(a), to_v128(b), to_v128(c)));
#else
  return a * b + c;
#endif
}

// The 8 bytes at p (any alignment) in lanes 0..7, zeros in lanes 8..15 (v128.load64_zero).
inline VecI8 load64_zero(const int8_t* p) {
#if defined(__wasm_simd128__)
  return from_v128<VecI8>(wasm_v128_load64_zero(p));
#else
  alignas(16) int8_t lanes[16] = {};
  std::memcpy(lanes, p, 8);
  return VecI8::load_aligned(lanes);
#endif
}

// a's 4 lanes then b's, each clamped to [0, 65535], as 8 unsigned 16-bit lanes (i16x8.narrow_i32x4_u).
inline VecU16 narrow_u16(VecI a, VecI b) {
#if defined(__wasm_simd128__)
  return from_v128<VecU16>(wasm_u16x8_narrow_i32x4(to_v128(a), to_v128(b)));
#else
  alignas(16) int32_t wide[8];
  a.store_aligned(wide);
  b.store_aligned(wide + 4);
  alignas(16) uint16_t lanes[8];
  for (int i = 0; i < 8; ++i) lanes[i] = static_cast<uint16_t>(std::min(std::max(wide[i], 0), 65535));
  return VecU16::load_aligned(lanes);
#endif
}

// int4 nibbles (codec_int4.hpp: two's complement) as int8 lanes: each byte's low nibble, or its high one
// brought down by a 16-bit shift, sign-extended (low, high: n in [-8, 7], as ((n & 15) ^ 8) - 8), or as n + 8
// in [0, 15] (low_u, high_u of offset(x), which is x with both nibbles' top bits flipped). Byte and 16-bit
// operations only: x86 has no byte shifts, and V8 spends 5 to 7 instructions on each i8x16 shift. Make one
// before a loop: its constants stay in registers.
struct Nibbles {
  VecI8 mask, bias, flip;
  Nibbles() : mask(int8_t{0x0F}), bias(int8_t{0x08}), flip(static_cast<int8_t>(0x88)) {
    pin_in_register(mask);
    pin_in_register(bias);
    pin_in_register(flip);
  }
  VecI8 offset(VecI8 x) const { return x ^ flip; }
  VecI8 low_u(VecI8 x) const { return x & mask; }
  VecI8 high_u(VecI8 x) const {
#if defined(__wasm_simd128__)
    return from_v128<VecI8>(wasm_u16x8_shr(to_v128(x), 4)) & mask;
#else
    return xsimd::bitwise_cast<VecI8>(xsimd::bitwise_cast<VecU16>(x) >> 4) & mask;
#endif
  }
  VecI8 low(VecI8 x) const { return (low_u(x) ^ bias) - bias; }
  VecI8 high(VecI8 x) const { return (high_u(x) ^ bias) - bias; }
};

// Bytes 0..7 (low) or 8..15 (high) of x zero-extended to 16-bit lanes (i16x8.extend_low/high_i8x16_u).
inline VecI16 extend_u8(VecI8 x, bool high) {
#if defined(__wasm_simd128__)
  return from_v128<VecI16>(high ? wasm_u16x8_extend_high_u8x16(to_v128(x)) : wasm_u16x8_extend_low_u8x16(to_v128(x)));
#else
  alignas(16) uint8_t bytes[16];
  x.store_aligned(reinterpret_cast<int8_t*>(bytes));
  alignas(16) int16_t lanes[8];
  for (int i = 0; i < 8; ++i) lanes[i] = bytes[i + (high ? 8 : 0)];
  return VecI16::load_aligned(lanes);
#endif
}

// The 4 bytes at p (any alignment) in lanes 0..3, zeros in lanes 4..15 (v128.load32_zero).
inline VecI8 load32_zero(const int8_t* p) {
#if defined(__wasm_simd128__)
  return from_v128<VecI8>(wasm_v128_load32_zero(p));
#else
  alignas(16) int8_t lanes[16] = {};
  std::memcpy(lanes, p, 4);
  return VecI8::load_aligned(lanes);
#endif
}

// Bytes 0..7 (low) or 8..15 (high) of x sign-extended to 16-bit lanes (i16x8.extend_low/high_i8x16_s).
inline VecI16 extend_i8(VecI8 x, bool high) {
#if defined(__wasm_simd128__)
  return from_v128<VecI16>(high ? wasm_i16x8_extend_high_i8x16(to_v128(x)) : wasm_i16x8_extend_low_i8x16(to_v128(x)));
#else
  alignas(16) int8_t bytes[16];
  x.store_aligned(bytes);
  alignas(16) int16_t lanes[8];
  for (int i = 0; i < 8; ++i) lanes[i] = bytes[i + (high ? 8 : 0)];
  return VecI16::load_aligned(lanes);
#endif
}

// The exact sums of adjacent products: lane i = a[2i] * b[2i] + a[2i+1] * b[2i+1] (i32x4.dot_i16x8_s).
inline VecI dot_i16(VecI16 a, VecI16 b) {
#if defined(__wasm_simd128__)
  return from_v128<VecI>(wasm_i32x4_dot_i16x8(to_v128(a), to_v128(b)));
#else
  alignas(16) int16_t x[8], y[8];
  a.store_aligned(x);
  b.store_aligned(y);
  alignas(16) int32_t lanes[4];
  for (int i = 0; i < 4; ++i) lanes[i] = int32_t{x[2 * i]} * y[2 * i] + int32_t{x[2 * i + 1]} * y[2 * i + 1];
  return VecI::load_aligned(lanes);
#endif
}

// p[0], p[1] repeated in every pair of 16-bit lanes (v128.load32_splat: one instruction, where building
// the pair from two scalars costs V8 six).
inline VecI16 splat_pair_i16(const int16_t* p) {
#if defined(__wasm_simd128__)
  return from_v128<VecI16>(wasm_v128_load32_splat(p));
#else
  int32_t pair;
  std::memcpy(&pair, p, 4);
  return xsimd::bitwise_cast<VecI16>(VecI(pair));
#endif
}

// nearbyint(a) then nearbyint(b) (ties to even) as 8 int16 lanes, NaN as 0, the rest clamped to
// [-32768, 32767] (f32x4.nearest, i32x4.trunc_sat_f32x4_s, i16x8.narrow_i32x4_s).
inline VecI16 round_i16(VecF a, VecF b) {
#if defined(__wasm_simd128__)
  const v128_t ia = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(to_v128(a)));
  const v128_t ib = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(to_v128(b)));
  return from_v128<VecI16>(wasm_i16x8_narrow_i32x4(ia, ib));
#else
  alignas(16) float x[8];
  a.store_aligned(x);
  b.store_aligned(x + 4);
  alignas(16) int16_t lanes[8];
  for (int i = 0; i < 8; ++i) {
    const float y = std::nearbyint(x[i]);
    lanes[i] = y != y ? int16_t{0} : static_cast<int16_t>(std::min(32767.0f, std::max(-32768.0f, y)));
  }
  return VecI16::load_aligned(lanes);
#endif
}

}  // namespace MHA_SIMD_VARIANT
}  // namespace simd
}  // namespace mha
