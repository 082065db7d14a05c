// Attention through the KV cache (docs/spec.md Part 3): cache_attend appends the new tokens' k and v
// and attends the new queries over every cached key, with query positions starting at the old length.
//
// Two kernels serve it:
//  - the decode kernel (its driver: decode_job.hpp, decode_plan/run/merge.cpp; its variants:
//    decode_simd128.cpp, decode_scalar.cpp) for any call. It is built for few new queries (n = 1..8): for each batch
//    item b and KV head g, the G = H / Hkv query heads that share g, times the n queries, are the rows of one
//    micro-kernel call, so every K/V element is read once per group and not once per query head. The visible keys are
//    cut into blocks of decode_keys_per_block(Dh8) keys at fixed positions (flash-decoding: split-K); each work item
//    (b, g, row block, key block) keeps its own max and sum, and the blocks are merged exactly with
//    their log-sum-exp. The split depends on positions only, never on the thread count, so the result
//    is bit-identical for every thread count.
//  - the tiled kernel (kernel.hpp) for a prefill (n >= 16) into an empty sequence, with every cache
//    option, on the new tokens' own k and v (other dtypes than float32: on a copy of them rounded as the
//    cache stores them), which then are exactly the cache's contents. A non-empty sequence always takes
//    the decode kernel: the tiled kernel reads K as strided rows and the cache holds K^T panels
//    (decode.cpp, tiled_sequence).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mha/kernels/kernel.hpp"  // VariantList
#include "mha/cache/kv_cache.hpp"
#include "mha/core/parallel.hpp"
#include "mha/core/shape.hpp"
#include "mha/core/test_seam.hpp"
#include "mha/core/visibility.hpp"
#include "mha/core/workspace.hpp"

namespace mha {

// Keys [first, last] (both included) that a query at `position` sees in a cache of `length` keys: the
// core's visibility rule (visibility.hpp, docs/spec.md 2.3) with T = length and no mask or kvLengths (a
// cache call has neither). Inclusive bounds because the decode kernels loop over [first, last]; empty
// when first > last.
struct KeySpan {
  int32_t first = 0;
  int32_t last = -1;
};
// window_left / window_right: -1 = unbounded (Infinity).
inline KeySpan visible_keys(int64_t position, int32_t length, bool causal, int32_t window_left, int32_t window_right) {
  KeyVisibility vis;
  vis.kv_seq_len = length;
  vis.kv_length = length;
  vis.query_offset = 0;
  vis.causal = causal;
  vis.window_left = window_left;
  vis.window_right = window_right;
  // row_range takes an int32 row; positions in a cache are < capacity <= INT32_MAX.
  const KeyRange range = vis.row_range(static_cast<int32_t>(position));
  if (range.empty()) return KeySpan{};
  return KeySpan{range.begin, range.end - 1};
}

// A decode kernel variant: the work of one item (decode_kernel.hpp). The variants of this build are
// listed in kernel_table.cpp, best first, like the tiled kernel's: simd128 when the core is built with
// SIMD, scalar always.
struct DecodeKernel;
using DecodeKernelList = VariantList<DecodeKernel>;
DecodeKernelList decode_kernel_variants();
const DecodeKernel& default_decode_kernel();  // the first of decode_kernel_variants()
const char* decode_kernel_name(const DecodeKernel& kernel);

// kDecodeKernel: never the tiled prefill; kExactRows: every row by the decode kernel's exact path (tests).
enum class CachePath { kAuto, kDecodeKernel, kExactRows };

// One cache call: its options (the stateless call's struct; bias, kvLengths, mask and queryOffset are no
// cache options: docs/spec.md Part 3) and its tensors. Queries sit at positions old length(b) + i, and
// with causal (the API's default) see keys up to their own position. Rope (docs/spec.md 4.5): keys are
// rotated once, at append, at their cache position, and stored rotated; queries at the same positions.
// The tables must hold every position of the call (kRopePosition) and need hold only those: a decode step
// passes the rows [min old length, max new length).
struct CacheAttendArgs : AttentionOptions {
  CacheAttendArgs() { causal = true; }  // as cache.attend: queries see keys up to their own position

  int32_t num_heads = 0;   // H, a multiple of the cache's Hkv
  int32_t new_tokens = 0;  // n >= 1: the rows of q, k, v and out per sequence
  // (B) real rows of each sequence, each in [0, n]; nullptr = n for all (docs/spec.md 4.6). Rows at index
  // >= new_token_counts[b] are padding: not read, not stored, their out rows 0. Sequence b's real rows
  // take positions length(b) + i.
  const int32_t* new_token_counts = nullptr;
  TensorView<const float> q;     // (B, n, H*Dh)
  TensorView<const float> k, v;  // k (B, n, Hkv*Dh), v (B, n, Hkv*Dv): the new tokens
  TensorView<float> out;         // (B, n, H*Dv); may be q itself (when Dv = Dh), must not overlap k or v
  // (B, H, n) output, optional: each row's log-sum-exp over its visible keys and the sink (natural log, as
  // the stateless call's), -inf for an empty row and for padding rows (out 0: a part that adds nothing to a
  // merge, docs/spec.md 5.3). Must not overlap q, k, v or out.
  float* lse = nullptr;
  const DecodeKernel* kernel = nullptr;  // nullptr = default_decode_kernel()
  CachePath path = CachePath::kAuto;
  // A shared prefix (docs/spec.md 5.2), read only: another cache of batch 1 with the same Hkv, Dh, Dv and
  // dtype whose Lp tokens come before every sequence's own. Sequence b's keys are then the prefix's at
  // positions [0, Lp) and its own at Lp + j; its queries sit at Lp + length(b) + i, and the rope tables
  // are indexed by these positions.
  const KVCache* prefix = nullptr;
};

// Everything the decode kernel reuses from call to call, owned by one instance (not thread-safe: one
// call at a time): every worker's scratch and the work items' partial results. Grows to the largest
// call seen; release() gives it back.
// The rows of one (batch item, KV head) are cut into row blocks of at most kDecodeMaxRowsPerItem rows;
// a row block runs against the key blocks that meet the union of its rows' visible keys.
struct DecodeRowBlock {
  int32_t batch = 0;      // b
  int32_t row_begin = 0;  // rows [row_begin, row_begin + rows) of the G*n rows, r = query * G + head
  int32_t rows = 0;
  KeySpan keys;             // union of the rows' visible keys
  int32_t first_block = 0;  // key blocks [first_block, first_block + blocks)
  int32_t blocks = 0;
  // Within the wave: the first work item of (this row block, g = 0) and its partial results, in floats.
  // The row block's items are Hkv * blocks, g-major: item_begin + g * blocks + (block - first_block).
  int64_t item_begin = 0;
  int64_t partial_begin = 0;
  int32_t item_floats = 0;  // floats of one item's partial results
};

struct DecodeScratch {
  std::vector<Workspace> workers;    // one per thread
  Workspace partials;                // m, l, o of every work item of the current wave
  Workspace rounded_kv;              // a float16 prefill's new k (rotated with rope) and v, rounded to halves
  Workspace staged_q;                // with rope: q rotated at its positions (B, n, H*Dh)
  Workspace tiled_lse;               // a tiled sequence's lse (H, rows) when rows < n, then placed in (B, H, n)
  Workspace prefix_states;           // a prefix call's two partial states: out (B, n, H*Dv), lse (B, H, n) x 2
  std::vector<int32_t> prefix_rows;  // (B + 1) a prefix pass's flat row starts; then (B) Lp for each sequence
  std::vector<DecodeRowBlock> row_blocks;
  std::vector<int32_t> first_positions, key_counts;  // (B) a cache_attend's old and new lengths
  std::vector<int32_t> decode_counts;                // (B) its rows the decode kernel computes
  // Partial results per wave; long prefills through the decode kernel run in several waves (tests lower it).
  int64_t max_partial_floats = int64_t{1} << 22;
  test_seam::DecodeCounters counters;  // counted only in the tests' cores (test_seam.hpp)
  void release();
};

// Checks a call against the cache without touching anything: the Status append + attend would give. The
// options get the stateless call's checks and statuses (validate_attention_options).
Status validate_cache_attend(const KVCache& cache, const CacheAttendArgs& args);

// Where row (b, h, i) of a call's lse goes (args.lse not null).
inline float* cache_lse(const CacheAttendArgs& args, int32_t b, int32_t h, int32_t i) {
  return args.lse + (int64_t{b} * args.num_heads + h) * args.new_tokens + i;
}

// Real rows of sequence b in a call (args.new_token_counts[b], or n).
inline int32_t new_token_count(const CacheAttendArgs& args, int32_t b) {
  return args.new_token_counts != nullptr ? args.new_token_counts[b] : args.new_tokens;
}

// Parts of cache_attend (decode_tiled.cpp): a prefill into an empty cache by the tiled kernel, then the
// append; the tiled kernel alone on sequences [first, first + batch), empty and with `rows` real rows
// each (no append); and the real rows of q, sequence b's rotated at positions [first_positions[b], ... +
// count_b), into scratch.staged_q (reserved by the caller), as a (B, n, H*Dh) view.
Status tiled_prefill(KVCache& cache, const CacheAttendArgs& args, DecodeScratch& scratch, ParallelAttention* parallel,
                     Workspace& tiled_scratch);
Status tiled_attend(const KVCache& cache, const CacheAttendArgs& args, int32_t first, int32_t batch, int32_t rows,
                    DecodeScratch& scratch, ParallelAttention* parallel, Workspace& tiled_scratch);
TensorView<const float> stage_rotated_q(const KVCache& cache, const CacheAttendArgs& args,
                                        const int32_t* first_positions, DecodeScratch& scratch);

// Appends args.k, args.v to the cache and writes out = attention of q over keys [0, new length(b)) of
// each sequence, queries at positions old length(b) + i. On any error status nothing changed: not the
// cache, not out.
// `parallel` (nullable) lends its thread pool and runs the tiled prefill; without it everything runs on
// the calling thread (the tiled prefill with `tiled_scratch`).
Status cache_attend(KVCache& cache, const CacheAttendArgs& args, DecodeScratch& scratch, ParallelAttention* parallel,
                    Workspace& tiled_scratch);

// cache_attend with args.prefix (decode_prefix.cpp): the prefix's pass over every sequence's queries at
// once, the append, the sequences' own pass, and the two states merged by their log-sum-exp.
Status prefix_attend(KVCache& cache, const CacheAttendArgs& args, DecodeScratch& scratch, ThreadPool* pool);

// A ring cache's call once a sequence passes its capacity (decode_ring.cpp): whether this call is one,
// and the call (validated by the caller), the ring's two runs of slots as two passes, merged.
bool ring_wraps(const KVCache& cache, const CacheAttendArgs& args);
Status ring_attend(KVCache& cache, const CacheAttendArgs& args, DecodeScratch& scratch, ThreadPool* pool);

// The decode kernel alone over the cache as it is: sequence b's real rows of q (B, n, H*Dh) at positions
// [first_positions[b], ... + count_b) against its keys [0, cache.length(b)). cache_attend calls it after
// appending.
Status decode_attention(const KVCache& cache, const CacheAttendArgs& args, const int32_t* first_positions,
                        DecodeScratch& scratch, ThreadPool* pool);

}  // namespace mha
