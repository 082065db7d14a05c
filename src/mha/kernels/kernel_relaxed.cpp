// The kernel variant mha::relaxed: the simd128 variant's source (kernel_simd128.cpp, simd128_tiles.hpp,
// simd_exp.hpp) compiled a second time, with MHA_VARIANT_RELAXED, for WebAssembly Relaxed SIMD. Its
// multiply-adds (QK^T and PV micro-kernels, the exp2 polynomial's Horner steps, the non-finite checks) are
// f32x4.relaxed_madd, which engines with FMA run as one fused instruction, rounded once: results differ
// from the simd128 variant in the last bits, within the golden tolerances, and are the same for any split
// of the work (every row still goes through the same operations).
//
// Built only for Emscripten, by clang-19 (CMakeLists.txt, mha_relaxed_object): Emscripten 3.1.6's clang 14
// emits the prototype opcodes of the proposal, which no engine accepts any more.
#ifndef MHA_VARIANT_RELAXED
#define MHA_VARIANT_RELAXED 1  // (CMake passes it too: every clang-19 object is the relaxed variant)
#endif
#include "mha/kernels/kernel_simd128.cpp"

// A module with this kernel fails to compile as a whole on an engine without Relaxed SIMD. This custom
// section (kept by wasm-ld and by binaryen) lets the loader name the missing feature without compiling
// it: web/src/loader/builds.ts reads it from the bytes of a wasmUrl / wasmBinary.
__asm__(
    ".section .custom_section.mha_wasm_features,\"\",@\n"
    ".ascii \"relaxed-simd\"\n"
    ".text\n");
