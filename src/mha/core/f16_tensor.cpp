#include "mha/core/f16_tensor.hpp"

#include <cstring>

#include "mha/core/f16.hpp"

namespace mha {

void widen_halves(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if MHA_F16_SIMD
  const f16::simd::Constants constants;
  alignas(16) uint16_t halves[8];
  for (; i + 8 <= n; i += 8) {
    std::memcpy(halves, src + i, sizeof halves);  // the 8 halves are read before dst[i..i+8) is written
    f16::simd::VecF lo, hi;
    f16::simd::load8<true, false>(halves, lo, hi, constants);
    lo.store_unaligned(dst + i);
    hi.store_unaligned(dst + i + 4);
  }
#endif
  for (; i < n; ++i) dst[i] = f16::decode(src[i]);
}

void narrow_floats(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if MHA_F16_SIMD
  alignas(16) uint16_t halves[8];
  for (; i + 8 <= n; i += 8) {
    const f16::simd::VecF lo = f16::simd::VecF::load_unaligned(src + i),
                          hi = f16::simd::VecF::load_unaligned(src + i + 4);
    f16::simd::store8(lo, hi, halves);
    std::memcpy(dst + i, halves, sizeof halves);
  }
#endif
  for (; i < n; ++i) dst[i] = f16::encode(src[i]);
}

}  // namespace mha
