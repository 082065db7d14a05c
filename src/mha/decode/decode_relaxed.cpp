// The decode kernel variant mha::relaxed: the simd128 decode kernel's source (decode_simd128.cpp,
// decode_simd128_micro.hpp) compiled a second time, with MHA_VARIANT_RELAXED, for WebAssembly Relaxed
// SIMD, as kernel_relaxed.cpp is for the tiled kernel: its micro-kernels' multiply-adds and the exp2 and
// tanh polynomials' Horner steps are f32x4.relaxed_madd (simd::madd), fused and rounded once where the
// engine has FMA. Results differ from simd128's in the last bits and are the same for any thread count
// (the split into work items depends on positions only).
//
// Built only for Emscripten, by clang-19 (CMakeLists.txt, mha_relaxed_object).
#ifndef MHA_VARIANT_RELAXED
#define MHA_VARIANT_RELAXED 1  // (CMake passes it too: every clang-19 object is the relaxed variant)
#endif
#include "mha/decode/decode_simd128.cpp"
