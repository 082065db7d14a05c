// Splitting d_model into heads and merging it back: the spec's view + transpose, as copies.
// The attention kernels never need these (they read heads in place by stride); they exist for users
// who want the (B, H, S, Dh) layout itself, and to show the mechanics.
#pragma once

#include "mha/core/shape.hpp"

namespace mha {

// x (B, S, D) -> xh (B, H, S, Dh): xh[b, h, s, e] = x[b, s, h*Dh + e].
Status split_heads(const float* x, int32_t batch, int32_t seq_len, int32_t d_model, int32_t num_heads, float* xh);

// xh (B, H, S, Dh) -> x (B, S, D): the exact inverse of split_heads (a pure permutation of floats).
Status merge_heads(const float* xh, int32_t batch, int32_t seq_len, int32_t d_model, int32_t num_heads, float* x);

}  // namespace mha
