// Which keys a query row may attend: the one definition (docs/spec.md 2.3) that the reference and every
// kernel variant call, so that a tile a kernel skips is exactly a tile the reference never reads.
//
// Key j is visible to query row i of batch item b when
//   range(i).begin <= j < range(i).end    and    mask[b, i, j] != 0 (no mask: always)
// with p_i = query_offset + i (the query's position; key j has position j) and
//   range(i) = [ max(0, p_i - window_left),  min(kv_length_b, causal ? p_i + 1 : T, p_i + window_right + 1) )
// where an unbounded window side (kUnbounded) drops its term and kv_length_b is kvLengths[b] (or T).
// Both ends of range(i) are non-decreasing in i: that is what lets a kernel bound a whole block of rows by
// its first and last row (rows_union, rows_common).
#pragma once

#include <algorithm>
#include <cstdint>

#include "mha/core/shape.hpp"

namespace mha {

struct KeyRange {
  int32_t begin = 0;  // first key
  int32_t end = 0;    // one past the last key; begin >= end means no key
  bool empty() const { return begin >= end; }
};

struct KeyVisibility {
  static constexpr int32_t kUnbounded = -1;  // a window side without a limit (Infinity in the API)

  int32_t kv_seq_len = 0;    // T: also the row stride of the mask
  int32_t kv_length = 0;     // keys [kv_length, T) are padding of this batch item (kvLengths[b], or T)
  int32_t query_offset = 0;  // position of query row 0 (queryOffset)
  bool causal = false;
  int32_t window_left = kUnbounded;   // keys at most this far before the query's position
  int32_t window_right = kUnbounded;  // keys at most this far after it
  const uint8_t* mask = nullptr;      // (S, T) of this batch item, nonzero = may attend; nullptr = none

  // Keys allowed to query row i by length, causality and window (the mask is not applied).
  KeyRange row_range(int32_t i) const {
    const int64_t p = int64_t{query_offset} + i;
    int64_t begin = 0, end = kv_length;
    if (window_left != kUnbounded) begin = std::max<int64_t>(begin, p - window_left);
    if (causal) end = std::min<int64_t>(end, p + 1);
    if (window_right != kUnbounded) end = std::min<int64_t>(end, p + int64_t{window_right} + 1);
    // Clamped into [0, T] (an empty range may come out with begin > end: both stay in int32).
    return KeyRange{static_cast<int32_t>(std::min<int64_t>(begin, kv_seq_len)),
                    static_cast<int32_t>(std::max<int64_t>(end, 0))};
  }

  // Keys that some row of [i_begin, i_end) may see by range: a superset of their union (rows are
  // non-empty, i_begin < i_end). Tiles outside it are hidden from every row of the block.
  KeyRange rows_union(int32_t i_begin, int32_t i_end) const {
    return KeyRange{row_range(i_begin).begin, row_range(i_end - 1).end};
  }

  // Keys that every row of [i_begin, i_end) may see by range (their intersection).
  KeyRange rows_common(int32_t i_begin, int32_t i_end) const {
    return KeyRange{row_range(i_end - 1).begin, row_range(i_begin).end};
  }

  // mask[b, i, 0], or nullptr without a mask.
  const uint8_t* mask_row(int32_t i) const { return mask != nullptr ? mask + int64_t{i} * kv_seq_len : nullptr; }

  bool visible(int32_t i, int32_t j) const {
    const KeyRange range = row_range(i);
    if (j < range.begin || j >= range.end) return false;
    return mask == nullptr || mask[int64_t{i} * kv_seq_len + j] != 0;
  }
};

// The visibility rule of batch item `batch` of a call.
inline KeyVisibility key_visibility(const AttentionArgs& args, int32_t batch) {
  KeyVisibility vis;
  vis.kv_seq_len = args.shape.kv_seq_len;
  vis.kv_length = args.kv_lengths != nullptr ? args.kv_lengths[batch] : args.shape.kv_seq_len;
  vis.query_offset = args.query_offset;
  vis.causal = args.causal;
  vis.window_left = args.window_left;
  vis.window_right = args.window_right;
  vis.mask = args.mask != nullptr ? args.mask + int64_t{batch} * args.shape.seq_len * args.shape.kv_seq_len : nullptr;
  return vis;
}

}  // namespace mha
