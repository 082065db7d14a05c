// float16 tensors in and out of a call (docs/spec.md 4.2): the exact widening of binary16 inputs to the
// float32 the kernels read, and the one rounding of a float32 result to binary16 (nearest even, overflow
// to +-inf, NaN stays NaN), 8 values per step with the SIMD codec of f16.hpp. Both work in place over
// one staging slot, so the TS layer needs no second buffer:
//   widen_halves: dst may start 2n bytes before src (the halves copied into the slot's upper half);
//   narrow_floats: dst may be src itself.
// In both, each step loads its 8 values before it stores, and the stores trail the loads.
#pragma once

#include <cstdint>

namespace mha {

// dst[i] = the float32 value of the binary16 bits src[i], for i in [0, n).
void widen_halves(const uint16_t* src, float* dst, int64_t n);

// dst[i] = src[i] rounded to binary16 bits, for i in [0, n).
void narrow_floats(const float* src, uint16_t* dst, int64_t n);

}  // namespace mha
