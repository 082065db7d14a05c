// Rotary position embedding applied where the kernels pack q and k (docs/spec.md 4.5), in float32:
// one helper for every kernel variant and the KV cache, so that they all round the same way.
#pragma once

#include <cstdint>

#include "mha/core/shape.hpp"

namespace mha {

// Rotates head vector x (entries `stride` floats apart: 1 for a row, the panel width for a packed
// panel) at `position` (< rope.positions, checked by the caller): for r in [0, rotary_dim / 2) the pair
// (a, b) = (x[r], x[r + rotary_dim/2]) (interleaved: (x[2r], x[2r+1])) becomes (a*c - b*s, b*c + a*s),
// c = cos[position, r], s = sin[position, r]. Entries from rotary_dim on stay. Out of line: one copy in a
// module for every caller (it runs once per packed row, beside a whole row of dot products).
[[gnu::noinline]] inline void rotate_head(float* x, int64_t stride, const RotaryTables& rope, int64_t position) {
  const int32_t half = rope.rotary_dim / 2;
  const float* c = rope.cos + rope.row_offset(position);
  const float* s = rope.sin + rope.row_offset(position);
  for (int32_t r = 0; r < half; ++r) {
    const int64_t i0 = (rope.interleaved ? 2 * r : r) * stride;
    const int64_t i1 = (rope.interleaved ? 2 * r + 1 : r + half) * stride;
    const float a = x[i0], b = x[i1];
    x[i0] = a * c[r] - b * s[r];
    x[i1] = b * c[r] + a * s[r];
  }
}

}  // namespace mha
