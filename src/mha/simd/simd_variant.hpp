// The SIMD kernel variants and their namespace: one source (kernel_simd128.cpp, decode_simd128.cpp and the
// headers they include) is compiled once per variant, and everything it defines, inline helpers included,
// lives in mha::<variant> (mha::simd::<variant> for the helpers), highway's HWY_NAMESPACE idea.
#pragma once

// The variants: mha::simd128 (kernel_simd128.cpp as it is) and mha::relaxed
// (the same file compiled again with MHA_VARIANT_RELAXED, -mrelaxed-simd, by clang-19: CMakeLists.txt).
// Each has its own namespace, also for these inline helpers, so the two translation units never share one.
#if MHA_VARIANT_RELAXED
#if !defined(__wasm_relaxed_simd__)
#error "MHA_VARIANT_RELAXED needs WebAssembly Relaxed SIMD (-mrelaxed-simd)"
#endif
#define MHA_SIMD_VARIANT relaxed
#define MHA_SIMD_VARIANT_NAME "relaxed"
#else
#define MHA_SIMD_VARIANT simd128
#define MHA_SIMD_VARIANT_NAME "simd128"
#endif
