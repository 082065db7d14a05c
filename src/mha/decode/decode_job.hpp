// The decode driver's shared state and its three phases, internal to src/mha/decode/ (decode.hpp is the
// interface):
//   plan   (decode_plan.cpp)   cut every sequence's rows into row blocks, their keys into key blocks, and
//                              the work items into waves that fit the partial results' scratch;
//   run    (decode_run.cpp)    each work item (row block, g, key block) through the decode kernel into its
//                              own partial slot (m, l, o), on any thread, in any order;
//   merge  (decode_merge.cpp)  per (row block, g), the key blocks' partials summed in block order by their
//                              log-sum-exp, so the result does not depend on the thread count; rows whose
//                              float32 result is not finite go through the reference (docs/spec.md).
// Work items are enumerated sequence-major, then row block, then KV head, then key block. A row block
// holds up to kDecodeMaxRowsPerItem rows of one sequence b (docs/spec.md 4.6: each sequence has its own
// length and real rows), so a short sequence beside a long one costs its own keys.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "mha/decode/decode.hpp"
#include "mha/core/numeric.hpp"
#include "mha/decode/decode_kernel.hpp"
#include "mha/reference/reference.hpp"

namespace mha {

// A shared prefix's pass (decode_prefix.cpp): the B query sequences' flat row starts (B + 1) over one
// sequence of keys.
struct SharedKeys {
  const int32_t* row_offsets = nullptr;
  int32_t batch = 0;
};

// Everything a work item or a merge needs; shared read-only by the threads (partials excepted).
struct DecodeJob {
  const KVCache* cache = nullptr;
  const CacheAttendArgs* args = nullptr;
  const DecodeKernel* kernel = nullptr;
  DecodeScratch* scratch = nullptr;
  int32_t group = 0;                             // G = H / Hkv
  int32_t head_dim = 0, value_dim = 0, dv8 = 0;  // Dh, Dv, Dv8
  int32_t keys_per_block = 0;                    // decode_keys_per_block(max(Dh8, Dv8))
  TensorView<const float> q;                     // args->q, or with rope its rotated copy (stage_rotated_q)
  const int32_t* lengths = nullptr;              // (B) sequence b sees keys [0, lengths[b])
  const int32_t* first_positions = nullptr;      // (B) the position of sequence b's query 0
  // A shared prefix's pass (decode_prefix.cpp): every sequence's queries read the keys of the cache's
  // sequence 0, and a row block may hold rows of several sequences, so that each key block is read once
  // for all of them. row_offsets (B + 1): sequence b's rows are the flat rows [row_offsets[b], ...[b + 1]).
  bool shared_keys = false;
  const int32_t* row_offsets = nullptr;
  int32_t cache_batch = 0;                     // B of the queries (a shared prefix itself holds one sequence)
  const DecodeRowBlock* row_blocks = nullptr;  // the wave's row blocks
  int32_t wave_row_blocks = 0;
  float* partials = nullptr;
  float score_scale = 0.0f, softcap_in = 0.0f, softcap_out = 0.0f;
  bool exact_only = false;  // the scale cannot be folded into a normal float: every row takes the exact path
};

// Row r of a (b, g) group of G*n rows is query r / G of head g*G + r % G. With shared keys, the rows of
// a row block are flat rows of every sequence in turn (row_offsets).
struct RowInfo {
  int32_t query = 0;  // i
  int32_t head = 0;   // h
  int32_t batch = 0;  // b, the sequence whose query this is
};
RowInfo shared_row_info(const DecodeJob& job, int32_t g, int32_t flat_row);  // decode_plan.cpp
inline RowInfo row_info(const DecodeJob& job, const DecodeRowBlock& rb, int32_t g, int32_t row) {
  if (job.shared_keys) return shared_row_info(job, g, rb.row_begin + row);
  const int32_t local = rb.row_begin + row;
  return RowInfo{local / job.group, g * job.group + local % job.group, rb.batch};
}
// The cache sequence whose keys query sequence b reads.
inline int32_t key_sequence(const DecodeJob& job, int32_t b) { return job.shared_keys ? 0 : b; }

inline const float* q_row(const DecodeJob& job, int32_t b, const RowInfo& ri) {
  const TensorView<const float>& q = job.q;
  return q.data + b * q.batch_stride + ri.query * q.row_stride + int64_t{ri.head} * job.head_dim;
}

inline KeySpan row_keys(const DecodeJob& job, int32_t b, int32_t query) {
  const AttentionOptions& o = *job.args;
  return visible_keys(int64_t{job.first_positions[b]} + query, job.lengths[b], o.causal, o.window_left, o.window_right);
}

// The partial results (m, l, o) of item (row block, g, key block).
struct Partial {
  float* m;
  float* l;
  float* o;
};
inline Partial partial_at(const DecodeJob& job, const DecodeRowBlock& rb, int32_t g, int32_t block) {
  float* base = job.partials + rb.partial_begin + (int64_t{g} * rb.blocks + (block - rb.first_block)) * rb.item_floats;
  return Partial{base, base + kDecodeMaxRowsPerItem, base + 2 * kDecodeMaxRowsPerItem};
}

constexpr float kLn2f = static_cast<float>(1.0 / kLog2e);

// A row's lse from its max m (log2 units of the scaled scores, as the sink) and its sum l: m ln 2 + ln l, in
// float32 with the logarithm the build's tiled kernel already links (the scalar kernel's logf, the SIMD
// kernel's log2f): another would bring musl's into the module (double log2: +3 kB gzipped, logf beside
// log2f: +0.6 kB). The two differ in the last bits only, as the builds' kernels do. A cache of integer
// arithmetic (`same_in_every_build`, docs/spec.md 5.1) takes log2f in every build: its results must not
// depend on the build.
inline float natural_lse(float m, float l, bool same_in_every_build) {
#if defined(MHA_KERNEL_SCALAR)
  if (!same_in_every_build) return m * kLn2f + std::log(l);
#endif
  (void)same_in_every_build;
  return (m + std::log2(l)) * kLn2f;
}

// ---- a call in two parts over disjoint keys (decode_parts.cpp: a shared prefix, a ring's two runs of slots)

// A call in two parts: q staged once (rotated), the first part's out (B, n, H*Dv) and both parts' lse
// (B, H, n) in scratch.prefix_states, and each pass's arguments: q as staged, no rope, no sink, empty rows
// 0 and lse -inf (so that the merge adds the sink once and decides what an empty row is); the first pass
// writes the scratch, the second args.out.
struct CallParts {
  TensorView<const float> staged_q;
  CacheAttendArgs first, second;
  const float* first_out = nullptr;
  const float* first_lse = nullptr;
  const float* second_lse = nullptr;
};
// Reserves and fills the parts of a call whose sequence b's queries rotate (with `rope`) at
// first_positions[b] + i; kOutOfMemory when the scratch cannot be had (nothing changed).
Status stage_parts(const KVCache& cache, const CacheAttendArgs& args, const RotaryTables& rope,
                   const int32_t* first_positions, DecodeScratch& scratch, CallParts& parts);

// What a row whose merge is not finite needs for its exact path: the reference over the call's whole key
// list (q as staged, rotated).
struct PartsMerge {
  const KVCache* cache = nullptr;
  const CacheAttendArgs* args = nullptr;
  const int32_t* first_positions = nullptr;  // (B) the position of sequence b's query 0 (old length)
};
using ExactPartsRow = void (*)(const PartsMerge& merge, int32_t b, int32_t i, int32_t h, const float* q,
                               double* scratch, float* out, float* lse);

// The reference's row of head h with the call's options (scale, causal, window, softcap, ALiBi, empty
// rows, sink) and q as staged; the caller sets the reader, the visibility's lengths and offset, the query.
ReferenceRow call_reference_row(const CacheAttendArgs& args, int32_t h, const float* q, int32_t head_dim,
                                int32_t value_dim);

// After both passes: args->out and args->lse = the two parts and the sink summed by their log-sum-exp
// (docs/spec.md 5.3), on this thread (exact rows in worker 0's scratch), and the padding rows' zeros.
void merge_parts(const PartsMerge& merge, const CallParts& parts, ExactPartsRow exact_row, DecodeScratch& scratch);

// ---- plan (decode_plan.cpp)

// The job of a call over lengths[b] keys of each sequence, its queries at first_positions[b] + i: the
// kernel, the dims and the scores' factors folded into log2 units (exact_only where one is not a normal float).
// With `shared`, a shared prefix's pass: keys of the cache's sequence 0 for every query sequence
// (DecodeJob::shared_keys).
DecodeJob make_job(const KVCache& cache, const CacheAttendArgs& args, const int32_t* first_positions,
                   const int32_t* lengths, DecodeScratch& scratch, const SharedKeys* shared = nullptr);

// Cuts the G * count_b real rows of every sequence b into row blocks and finds their key blocks.
void plan_row_blocks(const DecodeJob& job, std::vector<DecodeRowBlock>& row_blocks);

struct Wave {
  size_t begin = 0, end = 0;  // row blocks
  int64_t items = 0, floats = 0;
};
// The next wave from row block `begin`: as many row blocks as fit max_floats (at least one); sets each
// row block's item_begin and partial_begin relative to the wave. Each row block has `heads` (Hkv) times
// its key blocks of items.
Wave next_wave(std::vector<DecodeRowBlock>& row_blocks, size_t begin, int64_t heads, int64_t max_floats);

// Reserves everything the decode kernel will need for a call over lengths[b] keys of each sequence, so
// that nothing can fail once the cache has changed.
Status reserve_decode(const KVCache& cache, const CacheAttendArgs& args, const int32_t* first_positions,
                      const int32_t* lengths, DecodeScratch& scratch, ThreadPool* pool,
                      const SharedKeys* shared = nullptr);

// ---- run (decode_run.cpp)

// Work item `index` of the current wave into its partial slot (a ThreadPool task: ctx is the DecodeJob).
void run_item(void* ctx, int64_t index, int worker);

// Runs the planned call (scratch reserved by reserve_decode for the same arguments).
// With `lengths` null, the cache's own lengths; with `shared`, a shared prefix's pass (make_job).
void run_decode(const KVCache& cache, const CacheAttendArgs& args, const int32_t* first_positions,
                DecodeScratch& scratch, ThreadPool* pool, const int32_t* lengths = nullptr,
                const SharedKeys* shared = nullptr);

// Zeroes the out rows of the padding rows (index >= count_b) of every sequence (docs/spec.md 4.6).
void zero_padding_rows(const KVCache& cache, const CacheAttendArgs& args);

// ---- merge (decode_merge.cpp)

// Merges the key blocks of every row of one (row block, g) and writes the rows of out (a ThreadPool task).
void merge_row_block(void* ctx, int64_t index, int worker);

}  // namespace mha
