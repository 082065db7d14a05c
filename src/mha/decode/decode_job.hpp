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

#include <cstdint>
#include <vector>

#include "mha/decode/decode.hpp"
#include "mha/decode/decode_kernel.hpp"

namespace mha {

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
  const DecodeRowBlock* row_blocks = nullptr;    // the wave's row blocks
  int32_t wave_row_blocks = 0;
  float* partials = nullptr;
  float score_scale = 0.0f, softcap_in = 0.0f, softcap_out = 0.0f;
  bool exact_only = false;  // the scale cannot be folded into a normal float: every row takes the exact path
};

// Row r of a (b, g) group of G*n rows is query r / G of head g*G + r % G.
struct RowInfo {
  int32_t query = 0;  // i
  int32_t head = 0;   // h
};
inline RowInfo row_info(const DecodeJob& job, int32_t g, int32_t row) {
  return RowInfo{row / job.group, g * job.group + row % job.group};
}

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

// ---- plan (decode_plan.cpp)

// The job of a call over lengths[b] keys of each sequence, its queries at first_positions[b] + i: the
// kernel, the dims and the scores' factors folded into log2 units (exact_only where one is not a normal float).
DecodeJob make_job(const KVCache& cache, const CacheAttendArgs& args, const int32_t* first_positions,
                   const int32_t* lengths, DecodeScratch& scratch);

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
                      const int32_t* lengths, DecodeScratch& scratch, ThreadPool* pool);

// ---- run (decode_run.cpp)

// Work item `index` of the current wave into its partial slot (a ThreadPool task: ctx is the DecodeJob).
void run_item(void* ctx, int64_t index, int worker);

// Runs the planned call (scratch reserved by reserve_decode for the same arguments).
void run_decode(const KVCache& cache, const CacheAttendArgs& args, const int32_t* first_positions,
                DecodeScratch& scratch, ThreadPool* pool);

// Zeroes the out rows of the padding rows (index >= count_b) of every sequence (docs/spec.md 4.6).
void zero_padding_rows(const KVCache& cache, const CacheAttendArgs& args);

// ---- merge (decode_merge.cpp)

// Merges the key blocks of every row of one (row block, g) and writes the rows of out (a ThreadPool task).
void merge_row_block(void* ctx, int64_t index, int worker);

}  // namespace mha
