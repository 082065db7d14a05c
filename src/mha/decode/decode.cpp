// The decode driver: validation, the choice of kernel, the plan of work items, the parallel run, the exact
// merge of key blocks, and the exact path for rows whose float32 result is not finite.
//
// Work items: (row block, g, key block), where a row block holds up to kDecodeMaxRowsPerItem rows of one
// sequence b (docs/spec.md 4.6: each sequence has its own length and its own real rows), enumerated
// sequence-major, then row block, then KV head, then key block. A sequence's items cover only its own
// keys, so a short sequence beside a long one costs its own length, and the pool spreads the items by
// their real key counts. An item writes its partial (m, l, o) to its own slot, so items run in any order
// on any thread. The merge then runs per (row block, g) and sums the key blocks in block order: the
// result does not depend on the thread count. Plans that would need more partial results than
// DecodeScratch::max_partial_floats (long prefills through this kernel) run in waves of row blocks.
#include "mha/decode/decode.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mha/kernels/kernel.hpp"
#include "mha/decode/decode_kernel.hpp"
#include "mha/core/numeric.hpp"
#include "mha/reference/reference.hpp"  // exp_without_table

namespace mha {

#if MHA_TEST_SEAM
int test_seam::decode_phase_mask = 15;
#endif

const char* decode_kernel_name(const DecodeKernel& kernel) { return kernel.name; }

void DecodeScratch::release() {
  for (Workspace& w : workers) w.release();
  partials.release();
  rounded_kv.release();
  staged_q.release();
  row_blocks.clear();
  row_blocks.shrink_to_fit();
  for (std::vector<int32_t>* v : {&first_positions, &key_counts, &decode_counts}) {
    v->clear();
    v->shrink_to_fit();
  }
}

namespace {

constexpr double kLog2e = 1.4426950408889634;
// Merges of more partial results than this run on the pool.
constexpr int64_t kParallelMergeFloats = int64_t{1} << 18;
// A prefill of at least this many tokens into an empty cache runs the tiled kernel.
constexpr int32_t kTiledPrefillMinTokens = 16;

// The tiled kernel reads K and V as (T, Dh) rows through strides; the cache's K is in panels of K^T
// (kv_cache.hpp), so the tiled kernel serves only a prefill into an empty sequence, where the keys it
// must see are exactly the new tokens. A non-empty sequence keeps the decode kernel: reading the cached
// keys as rows would mean copying `length` of them per call (which the cache never does) or a
// tiled-kernel variant that packs from K^T panels. The choice is per sequence, on its own length and
// rows, so that each sequence of a batch takes the path (and gives the bits) it would alone.
bool tiled_sequence(const KVCache& cache, const CacheAttendArgs& args, int32_t b) {
  return args.path == CachePath::kAuto && cache.length(b) == 0 && new_token_count(args, b) >= kTiledPrefillMinTokens;
}

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
  const CacheAttendOptions& o = job.args->options;
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
  const int32_t b = rb.batch;

  const float* q_rows[kDecodeMaxRowsPerItem];
  KeySpan visible[kDecodeMaxRowsPerItem];
  int32_t position[kDecodeMaxRowsPerItem];
  float alibi[kDecodeMaxRowsPerItem];
  const float* slopes = job.args->options.alibi_slopes;
  for (int32_t r = 0; r < rb.rows; ++r) {
    const RowInfo ri = row_info(job, g, rb.row_begin + r);
    q_rows[r] = q_row(job, b, ri);
    visible[r] = row_keys(job, b, ri.query);
    position[r] = job.first_positions[b] + ri.query;
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
  static_cast<CacheHeadBlock&>(blk) = job.cache->head_block(b, g, blk.key_end);
  blk.score_scale = job.score_scale;
  blk.softcap_in = job.softcap_in;
  blk.softcap_out = job.softcap_out;
  const Partial partial = partial_at(job, rb, g, block);
  blk.m = partial.m;
  blk.l = partial.l;
  blk.o = partial.o;
  job.kernel->run(blk, job.scratch->workers[static_cast<size_t>(worker)].data());
}

// The test seam's count of the rows that took the exact path (test_seam.hpp).
void count_exact_row(const DecodeJob& job) {
  if (test_seam::kEnabled) job.scratch->counters.exact_rows.fetch_add(1, std::memory_order_relaxed);
}

// The exact path of one row: docs/spec.md 2.4 and 2.5 in double, over the keys the row sees, in the
// reference's order of operations (reference.cpp), so that with plain options it gives the reference's
// bits. Used for rows whose float32 result is not finite (non-finite inputs, float32 overflow, empty rows)
// and for scales that cannot be folded into the kernel's log2-unit scale.
// TODO(merge with #13): the reference gains these options there; this can then call its row function.
void exact_row(const DecodeJob& job, int32_t b, int32_t g, const RowInfo& ri, float* out) {
  const KVCache& cache = *job.cache;
  const CacheAttendOptions& o = job.args->options;
  const KeySpan keys = row_keys(job, b, ri.query);
  const int64_t position = int64_t{job.first_positions[b]} + ri.query;
  const float* q = q_row(job, b, ri);  // rotated with rope, as the stored keys
  const int32_t dh = job.head_dim, dv = job.value_dim;
  const bool sink = o.sinks != nullptr;
  std::vector<double> scores(static_cast<size_t>(std::max(0, keys.last - keys.first + 1)));
  double row_max = kNegInfDouble;
  bool any_nan = false;
  for (int32_t j = keys.first; j <= keys.last; ++j) {
    double dot = 0.0;
    for (int32_t d = 0; d < dh; ++d) dot += double{q[d]} * double{cache.key(b, g, j, d)};
    double s = dot * double{o.scale};
    if (o.softcap != 0.0f) s = double{o.softcap} * std::tanh(s / double{o.softcap});
    if (o.alibi_slopes != nullptr) s -= double{o.alibi_slopes[ri.head]} * std::fabs(double(position - j));
    scores[static_cast<size_t>(j - keys.first)] = s;
    row_max = std::fmax(row_max, s);
    any_nan |= std::isnan(s);
  }
  if (row_max == kNegInfDouble) {  // an empty row: no visible key, or every score -inf (the sink takes all)
    const float fill = ((o.empty_rows_zero || sink) && !any_nan) ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    for (int32_t d = 0; d < dv; ++d) out[d] = fill;
    return;
  }
  if (sink) row_max = std::fmax(row_max, double{o.sinks[ri.head]});
  double sum = sink ? exp_without_table(double{o.sinks[ri.head]} - row_max) : 0.0;
  for (double& s : scores) {
    s = exp_without_table(s - row_max);
    sum += s;
  }
  for (int32_t d = 0; d < dv; ++d) {
    double acc = 0.0;
    for (int32_t j = keys.first; j <= keys.last; ++j)
      acc += scores[static_cast<size_t>(j - keys.first)] * double{cache.value(b, g, j, d)};
    out[d] = static_cast<float>(acc / sum);
  }
}

// Merges the key blocks of every row of one (row block, g) and writes the rows of out.
void merge_row_block(void* ctx, int64_t index, int worker) {
  const DecodeJob& job = *static_cast<const DecodeJob*>(ctx);
  const int32_t heads = job.cache->config().num_kv_heads;
  const DecodeRowBlock& rb = job.row_blocks[index / heads];
  const int32_t b = rb.batch;
  const int32_t g = static_cast<int32_t>(index % heads);
  const int32_t dv = job.value_dim, dv8 = job.dv8;
  const float* sinks = job.args->options.sinks;
  float* merged = job.scratch->workers[static_cast<size_t>(worker)].data();  // (Dv8)
  const TensorView<float>& out = job.args->out;
  for (int32_t r = 0; r < rb.rows; ++r) {
    const RowInfo ri = row_info(job, g, rb.row_begin + r);
    float* dst = out.data + b * out.batch_stride + ri.query * out.row_stride + int64_t{ri.head} * dv;
    if (job.exact_only || rb.blocks == 0) {
      exact_row(job, b, g, ri, dst);
      count_exact_row(job);
      continue;
    }
    // The sink is one more partial: m = sink * log2(e), l = 1, o = 0 (merged after the key blocks).
    const float sink = sinks != nullptr ? static_cast<float>(double{sinks[ri.head]} * kLog2e) : kNegInf;
    float m = sink;
    for (int32_t k = 0; k < rb.blocks; ++k) m = std::max(m, partial_at(job, rb, g, rb.first_block + k).m[r]);
    const float m_sub = m == kNegInf ? 0.0f : m;
    float l = 0.0f;
    std::fill(merged, merged + dv8, 0.0f);
    for (int32_t k = 0; k < rb.blocks; ++k) {
      const Partial p = partial_at(job, rb, g, rb.first_block + k);
      const float weight = std::exp2(p.m[r] - m_sub);  // 1 for the block holding the max
      l += p.l[r] * weight;
      const float* o = p.o + int64_t{r} * dv8;
      for (int32_t d = 0; d < dv8; ++d) merged[d] += o[d] * weight;
    }
    if (sinks != nullptr) l += std::exp2(sink - m_sub);
    // A row that saw a visible key has l >= 1 (its max key adds 2^0 = 1). Checked before storing: out may
    // be q, and the exact path reads this row of q.
    bool finite = l >= 1.0f && l <= std::numeric_limits<float>::max();
    for (int32_t d = 0; d < dv; ++d) {
      merged[d] /= l;
      finite &= std::isfinite(merged[d]);
    }
    if (!finite) {
      exact_row(job, b, g, ri, dst);
      count_exact_row(job);
      continue;
    }
    std::copy(merged, merged + dv, dst);
  }
}

// Cuts the G * count_b real rows of every sequence b into row blocks and finds their key blocks.
void plan_row_blocks(const DecodeJob& job, std::vector<DecodeRowBlock>& row_blocks) {
  row_blocks.clear();
  for (int32_t b = 0; b < job.cache->config().batch; ++b) {
    const int32_t rows_total = job.group * new_token_count(*job.args, b);
    for (int32_t begin = 0; begin < rows_total; begin += kDecodeMaxRowsPerItem) {
      DecodeRowBlock rb;
      rb.batch = b;
      rb.row_begin = begin;
      rb.rows = std::min(kDecodeMaxRowsPerItem, rows_total - begin);
      // Visible ranges only move forward with the query (docs/spec.md 2.3), and none is empty in a cache
      // call (a query sees its own position), so the union is [first of the first, last of the last].
      const KeySpan first = row_keys(job, b, begin / job.group);
      const KeySpan last = row_keys(job, b, (begin + rb.rows - 1) / job.group);
      rb.keys = KeySpan{first.first, last.last};
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

// Scratch floats per worker: the kernel's (or the scalar kernel's, to which the SIMD kernel hands its
// cold float16 blocks: decode_path.hpp, DecodeLoader::kScalarKernel), and a merged row (Dv8).
size_t worker_floats(const DecodeKernel& kernel, int32_t head_dim, int32_t value_dim) {
  return std::max({kernel.scratch_floats(head_dim, value_dim),
                   scalar::kDecodeKernel.scratch_floats(head_dim, value_dim),
                   static_cast<size_t>(round_up(value_dim, 8))});
}

struct Wave {
  size_t begin = 0, end = 0;  // row blocks
  int64_t items = 0, floats = 0;
};

// The next wave from row block `begin`: as many row blocks as fit max_floats (at least one); sets each
// row block's item_begin and partial_begin relative to the wave. Each row block has `heads` (Hkv) times
// its key blocks of items.
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

DecodeJob make_job(const KVCache& cache, const CacheAttendArgs& args, const int32_t* first_positions,
                   const int32_t* lengths, DecodeScratch& scratch) {
  DecodeJob job;
  job.cache = &cache;
  job.args = &args;
  job.kernel = args.kernel != nullptr ? args.kernel : &default_decode_kernel();
  job.scratch = &scratch;
  job.group = args.options.num_heads / cache.config().num_kv_heads;
  job.head_dim = cache.config().head_dim;
  job.value_dim = cache.config().value_dim();
  job.dv8 = round_up(job.value_dim, 8);
  job.keys_per_block = decode_keys_per_block(std::max(round_up(job.head_dim, 8), job.dv8));
  job.q = args.q;
  job.lengths = lengths;
  job.first_positions = first_positions;
  const CacheAttendOptions& o = args.options;
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
  for (int32_t h = 0; o.sinks != nullptr && h < o.num_heads; ++h) {
    job.exact_only |= !normal(static_cast<float>(double{o.sinks[h]} * kLog2e));  // as the folded scale
  }
  job.exact_only |= args.path == CachePath::kExactRows;
  return job;
}

// Reserves everything the decode kernel will need for a call over lengths[b] keys of each sequence.
Status reserve_decode(const KVCache& cache, const CacheAttendArgs& args, const int32_t* first_positions,
                      const int32_t* lengths, DecodeScratch& scratch, ThreadPool* pool) {
  DecodeJob job = make_job(cache, args, first_positions, lengths, scratch);
  plan_row_blocks(job, scratch.row_blocks);
  const int64_t heads = cache.config().num_kv_heads;
  const int64_t partial_floats = largest_wave_floats(scratch.row_blocks, heads, scratch.max_partial_floats);
  const size_t threads = static_cast<size_t>(pool != nullptr ? pool->size() : 1);
  if (scratch.workers.size() < threads) scratch.workers = std::vector<Workspace>(threads);
  const size_t floats = worker_floats(*job.kernel, job.head_dim, job.value_dim);
  for (Workspace& w : scratch.workers)
    if (!w.reserve(floats)) return Status::kOutOfMemory;
  const KVCacheConfig& c = cache.config();
  const size_t q_floats = size_t(c.batch) * args.new_tokens * args.options.num_heads * c.head_dim;
  if (args.options.rope.enabled() && !scratch.staged_q.reserve(q_floats)) return Status::kOutOfMemory;
  if (!scratch.partials.reserve(static_cast<size_t>(std::max<int64_t>(partial_floats, 16))))
    return Status::kOutOfMemory;
  return Status::kOk;
}

// Zeroes the out rows of the padding rows (index >= count_b) of every sequence (docs/spec.md 4.6).
void zero_padding_rows(const KVCache& cache, const CacheAttendArgs& args) {
  const int64_t width = int64_t{args.options.num_heads} * cache.config().value_dim();
  for (int32_t b = 0; b < cache.config().batch; ++b)
    for (int32_t i = new_token_count(args, b); i < args.new_tokens; ++i) {
      std::fill_n(args.out.data + b * args.out.batch_stride + i * args.out.row_stride, width, 0.0f);
    }
}

// Runs the planned call (scratch reserved by reserve_decode for the same arguments).
void run_decode(const KVCache& cache, const CacheAttendArgs& args, const int32_t* first_positions,
                DecodeScratch& scratch, ThreadPool* pool) {
  DecodeJob job = make_job(cache, args, first_positions, cache.lengths(), scratch);
  plan_row_blocks(job, scratch.row_blocks);
  const int64_t heads = cache.config().num_kv_heads;
  job.partials = scratch.partials.data();
  if (args.options.rope.enabled()) job.q = stage_rotated_q(cache, args, first_positions, scratch);
  // Work below kParallelMinFlops runs on the calling thread: waking workers costs more. Same bits.
  double query_keys = 0.0;  // sum over b of count_b * length(b)
  for (int32_t b = 0; b < cache.config().batch; ++b) query_keys += double(new_token_count(args, b)) * job.lengths[b];
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

}  // namespace

Status decode_attention(const KVCache& cache, const CacheAttendArgs& args, const int32_t* first_positions,
                        DecodeScratch& scratch, ThreadPool* pool) {
  const Status status = reserve_decode(cache, args, first_positions, cache.lengths(), scratch, pool);
  if (status != Status::kOk) return status;
  run_decode(cache, args, first_positions, scratch, pool);
  zero_padding_rows(cache, args);
  return Status::kOk;
}

Status cache_attend(KVCache& cache, const CacheAttendArgs& args, DecodeScratch& scratch, ParallelAttention* parallel,
                    Workspace& tiled_scratch) {
  const Status status = validate_cache_attend(cache, args);
  if (status != Status::kOk) return status;
  const Status storable =
      cache.check_storable(args.k, args.v, args.new_tokens, &args.options.rope, args.new_token_counts);
  if (storable != Status::kOk) return storable;  // before any output or storage is written
  const int32_t batch = cache.config().batch;
  int32_t tiled = 0;
  bool uniform = true;
  for (int32_t b = 0; b < batch; ++b) {
    tiled += tiled_sequence(cache, args, b) ? 1 : 0;
    uniform &= new_token_count(args, b) == args.new_tokens;
  }
  if (tiled == batch && uniform) return tiled_prefill(cache, args, scratch, parallel, tiled_scratch);
  ThreadPool* pool = parallel != nullptr ? &parallel->pool() : nullptr;
  // The sequences' old lengths are their queries' first positions; the new ones the keys they see. The
  // decode kernel computes the rows of every sequence that does not take the tiled kernel.
  scratch.first_positions.assign(cache.lengths(), cache.lengths() + batch);
  scratch.key_counts.resize(size_t(batch));
  scratch.decode_counts.resize(size_t(batch));
  for (int32_t b = 0; b < batch; ++b) {
    scratch.key_counts[size_t(b)] = cache.length(b) + new_token_count(args, b);
    scratch.decode_counts[size_t(b)] = tiled_sequence(cache, args, b) ? 0 : new_token_count(args, b);
  }
  CacheAttendArgs decoded = args;
  decoded.new_token_counts = scratch.decode_counts.data();
  const Status reserved =
      reserve_decode(cache, decoded, scratch.first_positions.data(), scratch.key_counts.data(), scratch, pool);
  if (reserved != Status::kOk) return reserved;
  for (int32_t b = 0; b < batch && tiled > 0; ++b) {  // before the append: they read only their new tokens
    if (!tiled_sequence(cache, args, b)) continue;
    const Status run = tiled_attend(cache, args, b, 1, new_token_count(args, b), scratch, parallel, tiled_scratch);
    if (run != Status::kOk) return run;
  }
  const Status appended = cache.append(args.k, args.v, args.new_tokens, &args.options.rope, args.new_token_counts);
  if (appended != Status::kOk) return appended;
  run_decode(cache, decoded, scratch.first_positions.data(), scratch, pool);
  zero_padding_rows(cache, args);
  return Status::kOk;
}

}  // namespace mha
