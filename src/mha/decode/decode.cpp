// The cache call's driver (decode.hpp): validation, the choice of kernel per sequence (the tiled kernel for
// a prefill into an empty sequence, else the decode kernel), the append, and the decode kernel's plan, run
// and merge (decode_job.hpp says how its phases divide the work).
#include "mha/decode/decode.hpp"

#include <algorithm>

#include "mha/decode/decode_job.hpp"
#include "mha/core/cold.hpp"

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
  tiled_lse.release();
  prefix_states.release();
  row_blocks.clear();
  row_blocks.shrink_to_fit();
  for (std::vector<int32_t>* v : {&first_positions, &key_counts, &decode_counts, &prefix_rows}) {
    v->clear();
    v->shrink_to_fit();
  }
}

namespace {

// A prefill of at least this many tokens into an empty cache runs the tiled kernel.
constexpr int32_t kTiledPrefillMinTokens = 16;

// The tiled kernel reads K and V as (T, Dh) rows through strides; the cache's K is in panels of K^T
// (kv_cache.hpp), so the tiled kernel serves only a prefill into an empty sequence, where the keys it
// must see are exactly the new tokens. A non-empty sequence keeps the decode kernel: reading the cached
// keys as rows would mean copying `length` of them per call (which the cache never does) or a
// tiled-kernel variant that packs from K^T panels. The choice is per sequence, on its own length and
// rows, so that each sequence of a batch takes the path (and gives the bits) it would alone.
bool tiled_sequence(const KVCache& cache, const CacheAttendArgs& args, int32_t b) {
  // Integer arithmetic (decode_integer.hpp) is the same in every variant only through the decode kernel.
  return args.path == CachePath::kAuto && !cache.config().integer && cache.length(b) == 0 &&
         new_token_count(args, b) >= kTiledPrefillMinTokens;
}

// kRopePosition unless the rope tables hold every position of the call: the old lengths' least up to the
// last new token of the longest sequence.
// With a prefix, positions start after its Lp tokens.
MHA_MINSIZE Status validate_cache_rope(const KVCache& cache, const CacheAttendArgs& args) {
  const int64_t prefix_length = args.prefix != nullptr ? args.prefix->length(0) : 0;
  int64_t last = -1;
  for (int32_t b = 0; b < cache.config().batch; ++b)
    last = std::max(last, int64_t{cache.length(b)} + new_token_count(args, b) - 1);
  return validate_rope_positions(args.rope, prefix_length + cache.min_length(), prefix_length + last);
}

// kCacheBadPrefix unless the prefix is another cache of one sequence with the same heads, dims and dtype.
MHA_MINSIZE Status validate_prefix(const KVCache& cache, const KVCache& prefix) {
  const KVCacheConfig& c = cache.config();
  const KVCacheConfig& p = prefix.config();
  const bool matches = p.batch == 1 && p.num_kv_heads == c.num_kv_heads && p.head_dim == c.head_dim &&
                       p.value_dim() == c.value_dim() && p.dtype == c.dtype;
  // A ring and a prefix do not combine (docs/spec.md 5.5).
  return &prefix != &cache && matches && !c.ring && !p.ring ? Status::kOk : Status::kCacheBadPrefix;
}

// A ring's window (docs/spec.md 5.5): bounded on the left, W + n <= capacity, and for a sequence that
// dropped tokens (length > stored) W <= stored, so that no query reaches a position the ring overwrote.
MHA_MINSIZE Status validate_ring_window(const KVCache& cache, const CacheAttendArgs& args) {
  const int32_t w = args.window_left;
  if (w < 0 || int64_t{w} + args.new_tokens > cache.config().capacity) return Status::kCacheRingWindow;
  for (int32_t b = 0; b < cache.config().batch; ++b) {
    const bool dropped = cache.length(b) > cache.stored(b);
    if (dropped && new_token_count(args, b) > 0 && w > cache.stored(b)) return Status::kCacheRingWindow;
  }
  return Status::kOk;
}

}  // namespace

MHA_COLD Status validate_cache_attend(const KVCache& cache, const CacheAttendArgs& args) {
  const KVCacheConfig& c = cache.config();
  if (args.new_tokens <= 0) return Status::kNonPositiveDim;
  if (args.num_heads <= 0 || args.num_heads % c.num_kv_heads != 0) return Status::kCacheHeadsMismatch;
  if (args.q.data == nullptr || args.k.data == nullptr || args.v.data == nullptr || args.out.data == nullptr)
    return Status::kNullPointer;
  const Status options = validate_attention_options(args, args.num_heads, c.head_dim);
  if (options != Status::kOk) return options;
  // (B, n, H*Dh) and (B, n, H*Dv) must stay below kMaxElements, as every tensor of the stateless call.
  const double rows = double(c.batch) * args.new_tokens * args.num_heads;
  if (rows * std::max(c.head_dim, c.value_dim()) >= double(kMaxElements)) return Status::kTooLarge;
  for (int32_t b = 0; args.new_token_counts != nullptr && b < c.batch; ++b) {
    if (args.new_token_counts[b] < 0 || args.new_token_counts[b] > args.new_tokens) return Status::kCacheBadNewTokens;
  }
  if (args.prefix != nullptr) {
    const Status prefix = validate_prefix(cache, *args.prefix);
    if (prefix != Status::kOk) return prefix;
  }
  const Status rope = validate_cache_rope(cache, args);
  if (rope != Status::kOk) return rope;
  if (c.ring) return validate_ring_window(cache, args);
  for (int32_t b = 0; b < c.batch; ++b)
    if (new_token_count(args, b) > c.capacity - cache.length(b)) return Status::kCacheFull;
  return Status::kOk;
}

Status cache_attend(KVCache& cache, const CacheAttendArgs& args, DecodeScratch& scratch, ParallelAttention* parallel,
                    Workspace& tiled_scratch) {
  if (args.prefix != nullptr)
    return prefix_attend(cache, args, scratch, parallel != nullptr ? &parallel->pool() : nullptr);
  const Status status = validate_cache_attend(cache, args);
  if (status != Status::kOk) return status;
  if (ring_wraps(cache, args))
    return ring_attend(cache, args, scratch, parallel != nullptr ? &parallel->pool() : nullptr);
  const Status storable = cache.check_storable(args.k, args.v, args.new_tokens, &args.rope, args.new_token_counts);
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
  const Status appended = cache.append(args.k, args.v, args.new_tokens, &args.rope, args.new_token_counts);
  if (appended != Status::kOk) return appended;
  run_decode(cache, decoded, scratch.first_positions.data(), scratch, pool);
  zero_padding_rows(cache, args);
  return Status::kOk;
}

}  // namespace mha
