// A shared prefix (docs/spec.md 5.2; FlashInfer's cascade attention): B sequences that all continue one
// prompt read its keys from one batch-1 cache instead of each holding a copy. A call is two passes of the
// decode driver (decode_job.hpp) and a merge:
//   prefix pass  every sequence's query rows against the prefix's keys as one group per KV head (shared
//                keys), so that a decode step reads each prefix key block once, not B times;
//   own pass     after the append, each sequence's rows against its own keys (positions Lp on);
//   merge        the two partial states (out, lse; neither holds the sink, an empty part is out 0 and lse
//                -inf) summed by their log-sum-exp with the sink, as mha.mergeAttention (docs/spec.md 5.3).
// A row whose merged result is not finite takes the reference over the concatenated keys, as the decode
// kernel's own rows do. Every row takes the decode kernel: the tiled prefill's keys start at position 0.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mha/core/cold.hpp"
#include "mha/core/numeric.hpp"
#include "mha/decode/decode_job.hpp"
#include "mha/reference/reference.hpp"

namespace mha {
namespace {

// The rope tables indexed by the cache's own positions: row p is the call's row Lp + p, so that append
// and the staged queries rotate at the true positions.
RotaryTables own_positions_rope(const RotaryTables& rope, int32_t prefix_length) {
  RotaryTables shifted = rope;
  if (rope.enabled()) {
    shifted.first_position = rope.first_position - prefix_length;
    shifted.positions = rope.positions - prefix_length;
  }
  return shifted;
}

// Keys [0, Lp) of the prefix, then sequence b's own, for the reference's reader.
struct PrefixedHead {
  const KVCache* prefix;
  const KVCache* cache;
  int32_t b, g, prefix_length;
};
float prefixed_key(const void* head, int32_t j, int32_t d) {
  const PrefixedHead& h = *static_cast<const PrefixedHead*>(head);
  return j < h.prefix_length ? h.prefix->key(0, h.g, j, d) : h.cache->key(h.b, h.g, j - h.prefix_length, d);
}
float prefixed_value(const void* head, int32_t j, int32_t d) {
  const PrefixedHead& h = *static_cast<const PrefixedHead*>(head);
  return j < h.prefix_length ? h.prefix->value(0, h.g, j, d) : h.cache->value(h.b, h.g, j - h.prefix_length, d);
}

// Row (b, i, h) by the reference over the prefix's keys and the sequence's own, as one key list (the
// merge's exact rows: decode_parts.cpp).
MHA_MINSIZE void exact_prefixed_row(const PartsMerge& merge, int32_t b, int32_t i, int32_t h, const float* q,
                                    double* scratch, float* out, float* lse) {
  const KVCache& cache = *merge.cache;
  const CacheAttendArgs& args = *merge.args;
  const int32_t old_length = merge.first_positions[b];
  const KVCacheConfig& c = cache.config();
  const int32_t prefix_length = args.prefix->length(0);
  const PrefixedHead head{args.prefix, &cache, b, h / (args.num_heads / c.num_kv_heads), prefix_length};
  ReferenceRow row = call_reference_row(args, h, q, c.head_dim, c.value_dim());
  row.reader = KeyValueReader{&head, &prefixed_key, &prefixed_value};
  row.visibility.kv_seq_len = prefix_length + cache.length(b);
  row.visibility.kv_length = row.visibility.kv_seq_len;
  row.visibility.query_offset = prefix_length + old_length;
  row.query = i;
  reference_attention_row(row, scratch, out, nullptr, lse);
}

}  // namespace

MHA_MINSIZE Status prefix_attend(KVCache& cache, const CacheAttendArgs& args, DecodeScratch& scratch,
                                 ThreadPool* pool) {
  const Status status = validate_cache_attend(cache, args);
  if (status != Status::kOk) return status;
  const KVCacheConfig& c = cache.config();
  const KVCache& prefix = *args.prefix;
  const int32_t batch = c.batch, prefix_length = prefix.length(0);
  CacheAttendArgs shifted = args;
  shifted.rope = own_positions_rope(args.rope, prefix_length);
  const Status storable = cache.check_storable(args.k, args.v, args.new_tokens, &shifted.rope, args.new_token_counts);
  if (storable != Status::kOk) return storable;

  // ---- plan: positions, the prefix pass's flat rows, and every buffer (nothing can fail after the append).
  scratch.first_positions.assign(cache.lengths(), cache.lengths() + batch);  // the own pass's queries
  scratch.key_counts.resize(size_t(batch));
  scratch.prefix_rows.resize(size_t(3 * batch + 1));
  int32_t* row_offsets = scratch.prefix_rows.data();  // (B + 1)
  int32_t* prefix_lengths = row_offsets + batch + 1;  // (B) Lp
  int32_t* prefix_first = prefix_lengths + batch;     // (B) Lp + old length
  const int32_t group = args.num_heads / c.num_kv_heads;
  row_offsets[0] = 0;
  for (int32_t b = 0; b < batch; ++b) {
    row_offsets[b + 1] = row_offsets[b] + group * new_token_count(args, b);
    prefix_lengths[b] = prefix_length;
    prefix_first[b] = prefix_length + cache.length(b);
    scratch.key_counts[size_t(b)] = cache.length(b) + new_token_count(args, b);
  }
  const SharedKeys shared{row_offsets, batch};
  CallParts parts;
  if (stage_parts(cache, args, shifted.rope, scratch.first_positions.data(), scratch, parts) != Status::kOk)
    return Status::kOutOfMemory;
  const CacheAttendArgs& prefix_pass = parts.first;
  const CacheAttendArgs& own_pass = parts.second;
  Status reserved = reserve_decode(prefix, prefix_pass, prefix_first, prefix_lengths, scratch, pool, &shared);
  if (reserved == Status::kOk)
    reserved =
        reserve_decode(cache, own_pass, scratch.first_positions.data(), scratch.key_counts.data(), scratch, pool);
  if (reserved != Status::kOk) return reserved;

  // ---- the prefix pass (it reads only the staged q), the append, the own pass, the merge.
  run_decode(prefix, prefix_pass, prefix_first, scratch, pool, prefix_lengths, &shared);
  const Status appended = cache.append(args.k, args.v, args.new_tokens, &shifted.rope, args.new_token_counts);
  if (appended != Status::kOk) return appended;
  run_decode(cache, own_pass, scratch.first_positions.data(), scratch, pool);
  merge_parts(PartsMerge{&cache, &args, scratch.first_positions.data()}, parts, &exact_prefixed_row, scratch);
  return Status::kOk;
}

}  // namespace mha
