// A ring cache's call once a sequence has wrapped (docs/spec.md 5.5; ONNX TensorScatter's circular mode,
// onnxruntime's sliding_window_cache): position p of a sequence lives in slot p % C, so its stored
// positions [length - stored, length) are two runs of slots, each a run of consecutive positions:
//   newer  slots [0, E - W0)      positions W0 + slot         (W0 = the last multiple of C below E = the new length)
//   older  slots [E - W0, C)      positions W0 - C + slot
// Each run is a pass of the decode driver over the slots as keys, with the queries' positions moved into
// the run's frame (p - W0, or p - W0 + C): causality, the window and ALiBi distances only compare
// positions, and q is rotated at its true position before the passes (the keys were, at append). The
// window rule (validate_cache_attend) keeps every query's keys among the stored positions, so a slot that
// holds the other run's token is always outside the window in a run's frame. The two states are merged as
// a prefix's are (decode_parts.cpp); a call in which no sequence has wrapped is a plain cache call.
#include <algorithm>

#include "mha/core/cold.hpp"
#include "mha/decode/decode_job.hpp"

namespace mha {
namespace {

// Slot j of sequence b read as position j, through the reference's reader (the exact rows).
struct RingHead {
  const KVCache* cache;
  int32_t b, g;
};
float ring_key(const void* head, int32_t j, int32_t d) {
  const RingHead& h = *static_cast<const RingHead*>(head);
  return h.cache->key(h.b, h.g, h.cache->slot(j), d);
}
float ring_value(const void* head, int32_t j, int32_t d) {
  const RingHead& h = *static_cast<const RingHead*>(head);
  return h.cache->value(h.b, h.g, h.cache->slot(j), d);
}

// Row (b, i, h) by the reference over the sequence's positions [0, length) (only stored ones are visible).
MHA_MINSIZE void exact_ring_row(const PartsMerge& merge, int32_t b, int32_t i, int32_t h, const float* q,
                                double* scratch, float* out, float* lse) {
  const KVCache& cache = *merge.cache;
  const CacheAttendArgs& args = *merge.args;
  const KVCacheConfig& c = cache.config();
  const RingHead head{&cache, b, h / (args.num_heads / c.num_kv_heads)};
  ReferenceRow row = call_reference_row(args, h, q, c.head_dim, c.value_dim());
  row.reader = KeyValueReader{&head, &ring_key, &ring_value};
  row.visibility.kv_seq_len = cache.length(b);
  row.visibility.kv_length = cache.length(b);
  row.visibility.query_offset = merge.first_positions[b];
  row.query = i;
  reference_attention_row(row, scratch, out, nullptr, lse);
}

}  // namespace

bool ring_wraps(const KVCache& cache, const CacheAttendArgs& args) {
  const KVCacheConfig& c = cache.config();
  if (!c.ring) return false;
  for (int32_t b = 0; b < c.batch; ++b)
    if (cache.length(b) + new_token_count(args, b) > c.capacity) return true;
  return false;
}

MHA_MINSIZE Status ring_attend(KVCache& cache, const CacheAttendArgs& args, DecodeScratch& scratch, ThreadPool* pool) {
  const KVCacheConfig& c = cache.config();
  const Status storable = cache.check_storable(args.k, args.v, args.new_tokens, &args.rope, args.new_token_counts);
  if (storable != Status::kOk) return storable;
  // ---- plan: each run's key count and query position per sequence, and every buffer.
  const int32_t batch = c.batch, capacity = c.capacity;
  scratch.first_positions.assign(cache.lengths(), cache.lengths() + batch);  // true positions: rope
  scratch.prefix_rows.resize(size_t(4 * batch));
  int32_t* newer_keys = scratch.prefix_rows.data();
  int32_t* newer_first = newer_keys + batch;
  int32_t* older_keys = newer_first + batch;
  int32_t* older_first = older_keys + batch;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t old_length = cache.length(b), count = new_token_count(args, b);
    const int32_t end = old_length + count;                              // E
    const int32_t wrap = end > 0 ? (end - 1) / capacity * capacity : 0;  // W0
    const int32_t kept = std::min(capacity, cache.stored(b) + count);    // stored after the append
    newer_keys[b] = end - wrap;
    newer_first[b] = old_length - wrap;  // negative for queries before the wrap: they see none of the run
    older_keys[b] = end - kept < wrap ? capacity : 0;
    older_first[b] = old_length - (wrap - capacity);
  }
  CallParts parts;
  if (stage_parts(cache, args, args.rope, scratch.first_positions.data(), scratch, parts) != Status::kOk)
    return Status::kOutOfMemory;
  const CacheAttendArgs& older = parts.first;
  const CacheAttendArgs& newer = parts.second;
  Status reserved = reserve_decode(cache, older, older_first, older_keys, scratch, pool);
  if (reserved == Status::kOk) reserved = reserve_decode(cache, newer, newer_first, newer_keys, scratch, pool);
  if (reserved != Status::kOk) return reserved;

  // ---- the append, both runs over the slots as they then are, the merge.
  const Status appended = cache.append(args.k, args.v, args.new_tokens, &args.rope, args.new_token_counts);
  if (appended != Status::kOk) return appended;
  run_decode(cache, older, older_first, scratch, pool, older_keys);
  run_decode(cache, newer, newer_first, scratch, pool, newer_keys);
  merge_parts(PartsMerge{&cache, &args, scratch.first_positions.data()}, parts, &exact_ring_row, scratch);
  return Status::kOk;
}

}  // namespace mha
