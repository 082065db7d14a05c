// Where a KV cache puts one KV head's elements and scales (the layout of kv_cache.hpp), for the cache, the
// codecs (codec_*.hpp) and the decode kernels: each offset is written once, here.
#pragma once

#include <cstdint>

namespace mha {

constexpr int32_t kKeysPerPanel = 32;  // P
// Where element d of key j sits among one KV head's key panels (from its panel 0): panel j / P, panel
// row d, column j % P.
constexpr int64_t key_panel_offset(int32_t j, int32_t d, int32_t head_dim) {
  return int64_t{j / kKeysPerPanel} * head_dim * kKeysPerPanel + int64_t{d} * kKeysPerPanel + j % kKeysPerPanel;
}

// A block-scaled dtype (int8) keeps one float32 scale per block of kScaleBlock consecutive head-dim elements
// of each token's key and value (the last block may be shorter).
constexpr int32_t kScaleBlock = 32;
constexpr int32_t scale_blocks(int32_t dim) { return (dim + kScaleBlock - 1) / kScaleBlock; }  // NBk, NBv
// The scale of element d of key j among one KV head's key scales (panels, NBk, P): a panel's keys' scales
// in rows of P, so that one row scales a panel row's keys.
constexpr int64_t key_scale_offset(int32_t j, int32_t d, int32_t head_dim) {
  return int64_t{j / kKeysPerPanel} * scale_blocks(head_dim) * kKeysPerPanel + (d / kScaleBlock) * kKeysPerPanel +
         j % kKeysPerPanel;
}
// The scale of element d of value j among one KV head's value scales (capacity, NBv).
constexpr int64_t value_scale_offset(int32_t j, int32_t d, int32_t value_dim) {
  return int64_t{j} * scale_blocks(value_dim) + d / kScaleBlock;
}

}  // namespace mha
