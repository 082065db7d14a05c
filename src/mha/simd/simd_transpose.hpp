// A 4x4 transpose of float vectors in registers, for packing rows into panels: the tiled kernels' Q
// panels and K^T tiles (simd128_tiles.hpp) and the KV cache's key panels (kv_cache.cpp). In each SIMD
// variant's namespace, as the other inline helpers (simd_variant.hpp says why).
#pragma once

#include <xsimd/xsimd.hpp>

#include "mha/simd/simd_exp.hpp"  // VecF, MHA_SIMD_VARIANT

namespace mha {
namespace simd {
inline namespace MHA_SIMD_VARIANT {

// [a0 a1 b0 b1] and [a2 a3 b2 b3]: xsimd's zips of the vectors seen as 2 doubles (SSE's movelh/movehl).
inline VecF zip_lo_pairs(VecF a, VecF b) {
  using VecD = xsimd::batch<double>;
  return xsimd::bitwise_cast<VecF>(xsimd::zip_lo(xsimd::bitwise_cast<VecD>(a), xsimd::bitwise_cast<VecD>(b)));
}
inline VecF zip_hi_pairs(VecF a, VecF b) {
  using VecD = xsimd::batch<double>;
  return xsimd::bitwise_cast<VecF>(xsimd::zip_hi(xsimd::bitwise_cast<VecD>(a), xsimd::bitwise_cast<VecD>(b)));
}

// Rows x0..x3 in, columns out (the 8 shuffles of _MM_TRANSPOSE4_PS).
inline void transpose_4x4(VecF& x0, VecF& x1, VecF& x2, VecF& x3) {
  const VecF t0 = xsimd::zip_lo(x0, x1);  // x00 x10 x01 x11
  const VecF t1 = xsimd::zip_lo(x2, x3);  // x20 x30 x21 x31
  const VecF t2 = xsimd::zip_hi(x0, x1);  // x02 x12 x03 x13
  const VecF t3 = xsimd::zip_hi(x2, x3);  // x22 x32 x23 x33
  x0 = zip_lo_pairs(t0, t1);
  x1 = zip_hi_pairs(t0, t1);
  x2 = zip_lo_pairs(t2, t3);
  x3 = zip_hi_pairs(t2, t3);
}

}  // namespace MHA_SIMD_VARIANT
}  // namespace simd
}  // namespace mha
