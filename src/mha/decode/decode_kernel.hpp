// The interface between the decode driver (decode_run.cpp) and its kernel variants (decode_simd128.cpp,
// decode_scalar.cpp): one work item = some query rows of one (batch item, KV head) against one block of
// keys, producing that block's partial softmax (max, sum, unnormalized output) per row.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mha/cache/kv_cache.hpp"

namespace mha {

// Split-K blocks: decode_keys_per_block(Dh8) keys at fixed positions (multiples of it). 512 keys while a
// block's float32 keys and values take at most 512 kB (Dh8 <= 128), so that the grouped path's read of a
// whole block into L2 (decode_simd128.cpp, touch_block) fits a 1 MB L2 twice; 256 above. Every item pays
// a stream restart and a merge, so fewer, longer blocks are faster where they fit. Not longer still:
// that would halve again the split-K work of a short cache (one KV head, 1k tokens: a single block).
constexpr int32_t kDecodeMaxKeysPerBlock = 512;
constexpr int32_t kDecodeMinKeysPerBlock = kDecodeMaxKeysPerBlock / 2;
constexpr int32_t decode_keys_per_block(int32_t dh8) {
  return dh8 <= 128 ? kDecodeMaxKeysPerBlock : kDecodeMinKeysPerBlock;
}
constexpr int32_t kDecodeMaxRowsPerItem = 32;  // query rows (G heads x n queries) of one work item
static_assert(kDecodeMinKeysPerBlock % kKeysPerPanel == 0, "blocks start on panel boundaries");

// Rows are r = query * G + head-in-group (decode_job.hpp); everything per row is given explicitly here.
// The cache's part (key_panels, value_rows, key_scales, value_scales, dtype, specials) is
// KVCache::head_block's (kv_cache.hpp).
struct DecodeBlock : CacheHeadBlock {
  int32_t head_dim = 0;   // Dh
  int32_t value_dim = 0;  // Dv
  int32_t dv8 = 0;        // Dv rounded up to 8 (value row length, and o's)

  int32_t rows = 0;                      // <= kDecodeMaxRowsPerItem
  const float* const* q_rows = nullptr;  // q of row r: Dh floats
  const KeySpan* visible = nullptr;      // row r sees keys visible[r] (clipped to the block here)
  const int32_t* position = nullptr;     // query position of row r (ALiBi)
  const float* alibi = nullptr;          // slope * log2(e) of row r's head, or nullptr

  // Keys of the block, inside the union of the rows' visible keys; key_begin is at or after the start of
  // the block (a multiple of decode_keys_per_block), key_end - 1 before its end: at most
  // kDecodeMaxKeysPerBlock keys from the panel start at or before key_begin.
  int32_t key_begin = 0;
  int32_t key_end = 0;

  // Scores in log2 units: s = score_scale * (q . k), or with softcap
  // s = softcap_out * tanh(softcap_in * (q . k)) (softcap_in = scale / c, softcap_out = c * log2(e)).
  float score_scale = 0.0f;
  float softcap_in = 0.0f;  // 0 = no softcap
  float softcap_out = 0.0f;

  // Results of row r: m[r] = max score (log2 units; -inf if the row sees no key of the block),
  // l[r] = sum of 2^(s - m') and o[r * dv8 + d] = sum of 2^(s - m') v[d], with m' = m or 0 when m is -inf.
  // o is 16-byte aligned.
  float* m = nullptr;
  float* l = nullptr;
  float* o = nullptr;
};

struct DecodeKernel {
  const char* name;
  // Floats of scratch one worker needs for any item of these head dims (Dh, Dv; 64-byte aligned).
  size_t (*scratch_floats)(int32_t head_dim, int32_t value_dim);
  void (*run)(const DecodeBlock& block, float* scratch);
};

// The SIMD kernels hand their cold float16 blocks to this one (decode_path.hpp, DecodeLoader::kScalarKernel).
namespace scalar {
extern const DecodeKernel kDecodeKernel;  // decode_scalar.cpp
}

}  // namespace mha
