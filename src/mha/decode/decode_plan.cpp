// The decode driver's plan (decode_job.hpp): the job's factors, the row blocks and their key blocks, the
// waves of work items, and the reservation of everything a call needs before the cache changes.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mha/core/cold.hpp"
#include "mha/core/numeric.hpp"
#include "mha/decode/decode_job.hpp"

namespace mha {
namespace {

// Scratch floats per worker: the kernel's (or the scalar kernel's, to which the SIMD kernel hands its
// cold float16 blocks: decode_path.hpp, DecodeLoader::kScalarKernel), and the merge's: a merged row (Dv8)
// and an exact row's Dv doubles after it (decode_merge.cpp).
size_t worker_floats(const DecodeKernel& kernel, int32_t head_dim, int32_t value_dim) {
  return std::max({kernel.scratch_floats(head_dim, value_dim),
                   scalar::kDecodeKernel.scratch_floats(head_dim, value_dim),
                   static_cast<size_t>(round_up(value_dim, 8)) * 3});
}

// Sizes of the largest wave, for reserving before anything changes.
int64_t largest_wave_floats(std::vector<DecodeRowBlock>& row_blocks, int64_t heads, int64_t max_floats) {
  int64_t largest = 0;
  for (size_t begin = 0; begin < row_blocks.size();) {
    const Wave wave = next_wave(row_blocks, begin, heads, max_floats);
    largest = std::max(largest, wave.floats);
    begin = wave.end;
  }
  return largest;
}

}  // namespace

[[gnu::noinline]] DecodeJob make_job(const KVCache& cache, const CacheAttendArgs& args, const int32_t* first_positions,
                                     const int32_t* lengths, DecodeScratch& scratch, const SharedKeys* shared) {
  DecodeJob job;
  job.shared_keys = shared != nullptr;
  job.row_offsets = shared != nullptr ? shared->row_offsets : nullptr;
  job.cache_batch = shared != nullptr ? shared->batch : cache.config().batch;
  job.cache = &cache;
  job.args = &args;
  job.kernel = args.kernel != nullptr ? args.kernel : &default_decode_kernel();
  job.scratch = &scratch;
  job.group = args.num_heads / cache.config().num_kv_heads;
  job.head_dim = cache.config().head_dim;
  job.value_dim = cache.config().value_dim();
  job.dv8 = round_up(job.value_dim, 8);
  job.keys_per_block = decode_keys_per_block(std::max(round_up(job.head_dim, 8), job.dv8));
  job.q = args.q;
  job.lengths = lengths;
  job.first_positions = first_positions;
  const AttentionOptions& o = args;
  // Scores in log2 units. Where a folded factor is not a normal float it no longer carries the given
  // scale to float precision (or overflows): such calls take the exact path for every row.
  auto normal = [](float x) {
    return std::isfinite(x) && (x == 0.0f || std::fabs(x) >= std::numeric_limits<float>::min());
  };
  if (o.softcap != 0.0f) {
    job.softcap_in = static_cast<float>(double{o.scale} / double{o.softcap});
    job.softcap_out = static_cast<float>(double{o.softcap} * kLog2e);
    job.exact_only = !normal(job.softcap_in) || !normal(job.softcap_out) || job.softcap_in == 0.0f;
  } else {
    job.score_scale = static_cast<float>(double{o.scale} * kLog2e);
    job.exact_only = !normal(job.score_scale);
  }
  for (int32_t h = 0; o.sinks != nullptr && h < args.num_heads; ++h) {
    job.exact_only |= !normal(static_cast<float>(double{o.sinks[h]} * kLog2e));  // as the folded scale
  }
  job.exact_only |= args.path == CachePath::kExactRows;
  return job;
}

// Cuts the G * count_b real rows of every sequence b into row blocks and finds their key blocks.
// Out of line: the shared prefix's pass is one call among the decode driver's, and its rows cost a search.
MHA_MINSIZE RowInfo shared_row_info(const DecodeJob& job, int32_t g, int32_t flat_row) {
  const int32_t* offsets = job.row_offsets;
  const int32_t b =
      static_cast<int32_t>(std::upper_bound(offsets, offsets + job.cache_batch + 1, flat_row) - offsets) - 1;
  const int32_t local = flat_row - offsets[b];
  return RowInfo{local / job.group, g * job.group + local % job.group, b};
}

// The union of a shared-keys row block's visible keys. Every prefix key comes before every query, so a
// row at position p sees [max(0, p - window_left), Lp): the row of the least position sees them all.
MHA_COLD KeySpan shared_row_block_keys(const DecodeJob& job, const DecodeRowBlock& rb) {
  RowInfo least = shared_row_info(job, 0, rb.row_begin);
  for (int32_t r = 1; r < rb.rows; ++r) {
    const RowInfo ri = shared_row_info(job, 0, rb.row_begin + r);
    if (job.first_positions[ri.batch] + ri.query < job.first_positions[least.batch] + least.query) least = ri;
  }
  return row_keys(job, least.batch, least.query);
}

void plan_row_blocks(const DecodeJob& job, std::vector<DecodeRowBlock>& row_blocks) {
  row_blocks.clear();
  // With shared keys, the flat rows of every sequence form one run of row blocks (batch -1: per row).
  const int32_t runs = job.shared_keys ? 1 : job.cache_batch;
  for (int32_t b = 0; b < runs; ++b) {
    const int32_t rows_total =
        job.shared_keys ? job.row_offsets[job.cache_batch] : job.group * new_token_count(*job.args, b);
    for (int32_t begin = 0; begin < rows_total; begin += kDecodeMaxRowsPerItem) {
      DecodeRowBlock rb;
      rb.batch = job.shared_keys ? -1 : b;
      rb.row_begin = begin;
      rb.rows = std::min(kDecodeMaxRowsPerItem, rows_total - begin);
      if (job.shared_keys) {
        rb.keys = shared_row_block_keys(job, rb);
      } else {
        // Visible ranges only move forward with the query (docs/spec.md 2.3), and none is empty in a cache
        // call (a query sees its own position), so the union is [first of the first, last of the last].
        const KeySpan first = row_keys(job, b, begin / job.group);
        const KeySpan last = row_keys(job, b, (begin + rb.rows - 1) / job.group);
        rb.keys = KeySpan{first.first, last.last};
      }
      if (rb.keys.first <= rb.keys.last) {
        rb.first_block = rb.keys.first / job.keys_per_block;
        rb.blocks = rb.keys.last / job.keys_per_block - rb.first_block + 1;
      }
      rb.item_floats =
          static_cast<int32_t>(whole_lines_of_floats(size_t{2} * kDecodeMaxRowsPerItem + size_t(rb.rows) * job.dv8));
      row_blocks.push_back(rb);
    }
  }
}

Wave next_wave(std::vector<DecodeRowBlock>& row_blocks, size_t begin, int64_t heads, int64_t max_floats) {
  Wave wave;
  wave.begin = begin;
  wave.end = begin;
  while (wave.end < row_blocks.size()) {
    DecodeRowBlock& rb = row_blocks[wave.end];
    const int64_t floats = heads * rb.blocks * rb.item_floats;
    if (wave.end > begin && wave.floats + floats > max_floats) break;
    rb.item_begin = wave.items;
    rb.partial_begin = wave.floats;
    wave.items += heads * rb.blocks;
    wave.floats += floats;
    ++wave.end;
  }
  return wave;
}

[[gnu::noinline]] Status reserve_decode(const KVCache& cache, const CacheAttendArgs& args,
                                        const int32_t* first_positions, const int32_t* lengths, DecodeScratch& scratch,
                                        ThreadPool* pool, const SharedKeys* shared) {
  DecodeJob job = make_job(cache, args, first_positions, lengths, scratch, shared);
  plan_row_blocks(job, scratch.row_blocks);
  const int64_t heads = cache.config().num_kv_heads;
  const int64_t partial_floats = largest_wave_floats(scratch.row_blocks, heads, scratch.max_partial_floats);
  const size_t threads = static_cast<size_t>(pool != nullptr ? pool->size() : 1);
  if (scratch.workers.size() < threads) scratch.workers = std::vector<Workspace>(threads);
  const size_t floats = worker_floats(*job.kernel, job.head_dim, job.value_dim);
  for (Workspace& w : scratch.workers)
    if (!w.reserve(floats)) return Status::kOutOfMemory;
  const KVCacheConfig& c = cache.config();
  const size_t q_floats = size_t(job.cache_batch) * args.new_tokens * args.num_heads * c.head_dim;
  if (args.rope.enabled() && !scratch.staged_q.reserve(q_floats)) return Status::kOutOfMemory;
  if (!scratch.partials.reserve(static_cast<size_t>(std::max<int64_t>(partial_floats, 16))))
    return Status::kOutOfMemory;
  return Status::kOk;
}

}  // namespace mha
