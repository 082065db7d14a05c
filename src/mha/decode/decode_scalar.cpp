// The portable decode kernel: one work item of decode_kernel.hpp in plain float loops, row by row, for
// wasm engines without SIMD128 (the baseline build) and as a second variant under the same tests.
// Same block semantics as decode_simd128.cpp: per row, scores in log2 units over the keys of the block
// it sees, their max m, p = 2^(s - m), l = sum p, o = sum p v. Hidden keys are never read.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mha/decode/decode.hpp"
#include "mha/cache/cache_codecs.hpp"
#include "mha/decode/decode_kernel.hpp"
#include "mha/core/f16.hpp"
#include "mha/core/numeric.hpp"

namespace mha {
namespace scalar {
namespace {

// Element d of key j / value j of the head, as stored (kv_cache.hpp layout).
// int8 values are read back (q * scale) one by one: this kernel is the plain definition of a block.
inline float stored_key(const DecodeBlock& blk, int32_t j, int32_t d) {
  const int64_t at = key_panel_offset(j, d, blk.head_dim);
  switch (blk.dtype) {
    case CacheDType::kFloat32: return static_cast<const float*>(blk.key_panels)[at];
    case CacheDType::kFloat16: return f16::decode(static_cast<const uint16_t*>(blk.key_panels)[at]);
    case CacheDType::kBFloat16: return bf16::decode(static_cast<const uint16_t*>(blk.key_panels)[at]);
    case CacheDType::kInt8: break;
  }
  const int64_t scale_at = int64_t{j / kKeysPerPanel} * q8::blocks(blk.head_dim) * kKeysPerPanel +
                           (d / q8::kQuantBlock) * kKeysPerPanel + j % kKeysPerPanel;
  return q8::dequantize(static_cast<const int8_t*>(blk.key_panels)[at], blk.key_scales[scale_at]);
}
inline float stored_value(const DecodeBlock& blk, int32_t j, int32_t d) {
  const int64_t at = int64_t{j} * blk.dv8 + d;
  switch (blk.dtype) {
    case CacheDType::kFloat32: return static_cast<const float*>(blk.value_rows)[at];
    case CacheDType::kFloat16: return f16::decode(static_cast<const uint16_t*>(blk.value_rows)[at]);
    case CacheDType::kBFloat16: return bf16::decode(static_cast<const uint16_t*>(blk.value_rows)[at]);
    case CacheDType::kInt8: break;
  }
  const float scale = blk.value_scales[int64_t{j} * q8::blocks(blk.value_dim) + d / q8::kQuantBlock];
  return q8::dequantize(static_cast<const int8_t*>(blk.value_rows)[at], scale);
}

size_t scratch_floats(int32_t, int32_t) { return static_cast<size_t>(kDecodeMaxKeysPerBlock); }

void run(const DecodeBlock& blk, float* scratch) {
  float* p = scratch;  // scores, then weights, of keys [key_begin, key_end) for one row
  for (int32_t r = 0; r < blk.rows; ++r) {
    const float* q = blk.q_rows[r];
    const int32_t first = std::max(blk.visible[r].first, blk.key_begin);
    const int32_t last = std::min(blk.visible[r].last, blk.key_end - 1);
    float m = kNegInf;
    for (int32_t j = first; j <= last; ++j) {
      float dot = 0.0f;
      for (int32_t d = 0; d < blk.head_dim; ++d) dot += q[d] * stored_key(blk, j, d);
      // tanh in double, rounded to float: the same function the exact path and the reference call, so
      // the modules carry no float tanhf/expm1f beside it (-467 B zlib -9, issue #15).
      float s = blk.softcap_in != 0.0f ? blk.softcap_out * static_cast<float>(std::tanh(double{blk.softcap_in * dot}))
                                       : blk.score_scale * dot;
      if (blk.alibi != nullptr) s -= blk.alibi[r] * std::fabs(static_cast<float>(int64_t{blk.position[r]} - j));
      p[j - first] = s;
      m = s > m ? s : m;  // a NaN score is dropped here and poisons l below
    }
    const float m_sub = m == kNegInf ? 0.0f : m;
    float l = 0.0f;
    for (int32_t j = first; j <= last; ++j) {
      p[j - first] = std::exp2(p[j - first] - m_sub);
      l += p[j - first];
    }
    float* o = blk.o + int64_t{r} * blk.dv8;
    std::fill(o, o + blk.dv8, 0.0f);
    for (int32_t j = first; j <= last; ++j) {
      for (int32_t d = 0; d < blk.value_dim; ++d) o[d] += p[j - first] * stored_value(blk, j, d);
    }
    blk.m[r] = m;
    blk.l[r] = l;
  }
}

}  // namespace

const DecodeKernel kDecodeKernel{"scalar", &scratch_floats, &run};

}  // namespace scalar
}  // namespace mha
