// The decode driver's run (decode_job.hpp): each work item handed to the decode kernel as a DecodeBlock,
// the waves of items on the pool, and the padding rows' zeros.
#include <algorithm>

#include "mha/core/numeric.hpp"
#include "mha/decode/decode_job.hpp"

namespace mha {
namespace {

// Merges of more partial results than this run on the pool.
constexpr int64_t kParallelMergeFloats = int64_t{1} << 18;

}  // namespace

void run_item(void* ctx, int64_t index, int worker) {
  const DecodeJob& job = *static_cast<const DecodeJob*>(ctx);
  // The row block holding item `index`: the last whose item_begin <= index (one without key blocks has
  // no items and shares its item_begin with the next).
  const DecodeRowBlock* wave_end = job.row_blocks + job.wave_row_blocks;
  const DecodeRowBlock& rb = *(std::upper_bound(job.row_blocks, wave_end, index,
                                                [](int64_t i, const DecodeRowBlock& r) { return i < r.item_begin; }) -
                               1);
  const int64_t local = index - rb.item_begin;
  const int32_t g = static_cast<int32_t>(local / rb.blocks);
  const int32_t block = rb.first_block + static_cast<int32_t>(local % rb.blocks);

  const float* q_rows[kDecodeMaxRowsPerItem];
  KeySpan visible[kDecodeMaxRowsPerItem];
  int32_t position[kDecodeMaxRowsPerItem];
  float alibi[kDecodeMaxRowsPerItem];
  const float* slopes = job.args->alibi_slopes;
  for (int32_t r = 0; r < rb.rows; ++r) {
    const RowInfo ri = row_info(job, rb, g, r);
    q_rows[r] = q_row(job, ri.batch, ri);
    visible[r] = row_keys(job, ri.batch, ri.query);
    position[r] = job.first_positions[ri.batch] + ri.query;
    alibi[r] = slopes != nullptr ? static_cast<float>(double{slopes[ri.head]} * kLog2e) : 0.0f;
  }

  DecodeBlock blk;
  blk.head_dim = job.head_dim;
  blk.value_dim = job.value_dim;
  blk.dv8 = job.dv8;
  blk.rows = rb.rows;
  blk.q_rows = q_rows;
  blk.visible = visible;
  blk.position = position;
  blk.alibi = slopes != nullptr ? alibi : nullptr;
  blk.key_begin = std::max(block * job.keys_per_block, rb.keys.first);
  blk.key_end = std::min((block + 1) * job.keys_per_block, rb.keys.last + 1);
  static_cast<CacheHeadBlock&>(blk) = job.cache->head_block(job.shared_keys ? 0 : rb.batch, g, blk.key_end);
  blk.score_scale = job.score_scale;
  blk.softcap_in = job.softcap_in;
  blk.softcap_out = job.softcap_out;
  const Partial partial = partial_at(job, rb, g, block);
  blk.m = partial.m;
  blk.l = partial.l;
  blk.o = partial.o;
  job.kernel->run(blk, job.scratch->workers[static_cast<size_t>(worker)].data());
  if (test_seam::kEnabled && job.shared_keys)
    job.scratch->counters.prefix_keys.fetch_add(blk.key_end - blk.key_begin, std::memory_order_relaxed);
}

// Zeroes the out rows of the padding rows (index >= count_b) of every sequence (docs/spec.md 4.6).
[[gnu::noinline]] void zero_padding_rows(const KVCache& cache, const CacheAttendArgs& args) {
  const int64_t width = int64_t{args.num_heads} * cache.config().value_dim();
  for (int32_t b = 0; b < cache.config().batch; ++b)
    for (int32_t i = new_token_count(args, b); i < args.new_tokens; ++i) {
      std::fill_n(args.out.data + b * args.out.batch_stride + i * args.out.row_stride, width, 0.0f);
      for (int32_t h = 0; args.lse != nullptr && h < args.num_heads; ++h) *cache_lse(args, b, h, i) = kNegInf;
    }
}

[[gnu::noinline]] void run_decode(const KVCache& cache, const CacheAttendArgs& args, const int32_t* first_positions,
                                  DecodeScratch& scratch, ThreadPool* pool, const int32_t* lengths,
                                  const SharedKeys* shared) {
  DecodeJob job =
      make_job(cache, args, first_positions, lengths != nullptr ? lengths : cache.lengths(), scratch, shared);
  plan_row_blocks(job, scratch.row_blocks);
  const int64_t heads = cache.config().num_kv_heads;
  job.partials = scratch.partials.data();
  if (args.rope.enabled()) job.q = stage_rotated_q(cache, args, first_positions, scratch);
  // Work below kParallelMinFlops runs on the calling thread: waking workers costs more. Same bits.
  double query_keys = 0.0;  // sum over b of count_b * length(b)
  for (int32_t b = 0; b < job.cache_batch; ++b) query_keys += double(new_token_count(args, b)) * job.lengths[b];
  const double flops = 4.0 * double(heads) * job.group * query_keys * job.head_dim;
  const bool parallel = pool != nullptr && pool->size() > 1 && flops >= kParallelMinFlops;
  for (size_t begin = 0; begin < scratch.row_blocks.size();) {
    const Wave wave = next_wave(scratch.row_blocks, begin, heads, scratch.max_partial_floats);
    job.row_blocks = scratch.row_blocks.data() + wave.begin;
    job.wave_row_blocks = static_cast<int32_t>(wave.end - wave.begin);
    const int64_t items = wave.items;
    const int64_t merges = heads * job.wave_row_blocks;
    if (parallel) {
      if (!job.exact_only) pool->parallel_for(items, &run_item, &job);
      // A decode step's merge reads a few thousand partial floats: the calling thread does it sooner
      // than a second round trip through the pool (same bits either way).
      if (job.exact_only || wave.floats > kParallelMergeFloats) {
        pool->parallel_for(merges, &merge_row_block, &job);
      } else {
        for (int64_t i = 0; i < merges; ++i) merge_row_block(&job, i, 0);
      }
    } else {
      if (!job.exact_only)
        for (int64_t i = 0; i < items; ++i) run_item(&job, i, 0);
      for (int64_t i = 0; i < merges; ++i) merge_row_block(&job, i, 0);
    }
    begin = wave.end;
  }
}

Status decode_attention(const KVCache& cache, const CacheAttendArgs& args, const int32_t* first_positions,
                        DecodeScratch& scratch, ThreadPool* pool) {
  const Status status = reserve_decode(cache, args, first_positions, cache.lengths(), scratch, pool);
  if (status != Status::kOk) return status;
  run_decode(cache, args, first_positions, scratch, pool);
  zero_padding_rows(cache, args);
  return Status::kOk;
}

}  // namespace mha
