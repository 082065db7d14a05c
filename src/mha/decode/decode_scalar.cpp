// The portable decode kernel: one work item of decode_kernel.hpp in plain float loops, row by row, for
// wasm engines without SIMD128 (the baseline build) and as a second variant under the same tests.
// Same block semantics as decode_simd128.cpp: per row, scores in log2 units over the keys of the block
// it sees, their max m, p = 2^(s - m), l = sum p, o = sum p v. Hidden keys are never read.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mha/cache/cache_codecs.hpp"
#include "mha/core/numeric.hpp"
#include "mha/decode/decode.hpp"
#include "mha/decode/decode_kernel.hpp"
#if defined(MHA_KERNEL_SCALAR)
#define MHA_INTEGER_SIMD 0
#include "mha/decode/decode_integer.hpp"
#endif

namespace mha {
namespace scalar {
namespace {

// Element d of key j / value j of the head, as stored: the codecs' read (cache_codecs.hpp), the cache's
// own (KVCache::key / value). int8 values are read back (q * scale) one by one: this kernel is the plain
// definition of a block.
inline float stored_key(const DecodeBlock& blk, int32_t j, int32_t d) {
  return read_key(blk.dtype, blk.key_panels, blk.key_scales, j, d, blk.head_dim);
}
inline float stored_value(const DecodeBlock& blk, int32_t j, int32_t d) {
  return read_value(blk.dtype, blk.value_rows, blk.value_scales, j, d, blk.dv8, blk.value_dim);
}

// Integer arithmetic (decode_integer.hpp) only where this kernel is a variant of its own (the baseline
// build, the test cores: MHA_KERNEL_SCALAR). A SIMD module carries this kernel for its cold float16 blocks
// alone and runs integer blocks itself (decode_simd128.cpp's choose_decode_path), so it needs no second
// copy of that path (+3 kB gzipped).
#if defined(MHA_KERNEL_SCALAR)
size_t scratch_floats(int32_t head_dim, int32_t value_dim) {
  return std::max(static_cast<size_t>(kDecodeMaxKeysPerBlock), integer_decode::layout(head_dim, value_dim).total);
}
#else
size_t scratch_floats(int32_t, int32_t) { return static_cast<size_t>(kDecodeMaxKeysPerBlock); }
#endif

void run(const DecodeBlock& blk, float* scratch) {
#if defined(MHA_KERNEL_SCALAR)
  if (blk.integer) {
    integer_decode::run(blk, scratch);
    return;
  }
#endif
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
