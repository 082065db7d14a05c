// The parts of cache_attend (decode.hpp) around the decode kernel: the tiled prefill into an empty cache,
// and the rotated copy of q that the decode kernel reads with rope.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "mha/decode/decode.hpp"
#include "mha/core/rope.hpp"

namespace mha {
namespace {

// The sequences [first, first + batch) of a call, all empty and with the same count of real rows: the
// tiled kernel's batch.
struct Segment {
  int32_t first = 0, batch = 0, rows = 0;
};

template <typename T>
TensorView<T> segment_view(TensorView<T> view, const Segment& segment) {
  return TensorView<T>{view.data + segment.first * view.batch_stride, view.batch_stride, view.row_stride};
}

// Rows [0, rows(b)) of each of `batch` items of x (heads * Dh wide, through strides), copied into dst as a
// dense (batch, n, heads * Dh) tensor, each head rotated at position first(b) + i when rope is enabled.
// rows(b) = counts[b] (counts null: n); first(b) = first_positions[b] (null: 0). Rows past rows(b) are
// not written. The one copy-and-rotate of the cache's staged q and of a float16 prefill's keys.
void copy_rotated_rows(TensorView<const float> x, int32_t batch, int32_t n, const int32_t* counts, int32_t heads,
                       int32_t dh, const RotaryTables& rope, const int32_t* first_positions, float* dst) {
  const int64_t width = int64_t{heads} * dh;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t rows = counts != nullptr ? counts[b] : n;
    const int64_t first = first_positions != nullptr ? first_positions[b] : 0;
    for (int32_t i = 0; i < rows; ++i) {
      float* row = dst + (int64_t{b} * n + i) * width;
      std::copy_n(x.data + b * x.batch_stride + i * x.row_stride, width, row);
      for (int32_t h = 0; rope.enabled() && h < heads; ++h) rotate_head(row + int64_t{h} * dh, 1, rope, first + i);
    }
  }
}

// The (batch, rows, Hkv*Dh) keys of a segment rotated at positions [0, rows) and rounded as the cache
// stores them into dst (exactly the keys append stores).
void rotate_and_round_keys(const KVCacheConfig& c, const CacheAttendArgs& args, const Segment& segment, float* dst) {
  copy_rotated_rows(segment_view(args.k, segment), segment.batch, segment.rows, nullptr, c.num_kv_heads, c.head_dim,
                    args.rope, nullptr, dst);
  round_as_stored(c.dtype, dst, dst, int64_t{segment.batch} * segment.rows * c.num_kv_heads, c.head_dim);
}

// The stateless call equal to attending a segment's new tokens into an empty cache: the same options (a key
// at cache position j is rotated at j by the kernel as by append), queries at positions [0, n).
AttentionArgs tiled_args(const KVCacheConfig& c, const CacheAttendArgs& args, const Segment& segment) {
  const int32_t n = segment.rows;
  AttentionArgs tiled;
  tiled.options() = args.options();
  tiled.shape =
      AttentionShape{segment.batch, n, n, args.num_heads * c.head_dim, args.num_heads, c.num_kv_heads, c.v_head_dim};
  tiled.q = segment_view(args.q, segment);
  tiled.k = segment_view(args.k, segment);
  tiled.v = segment_view(args.v, segment);
  tiled.out = segment_view(args.out, segment);
  return tiled;
}

}  // namespace

[[gnu::noinline]] TensorView<const float> stage_rotated_q(const KVCache& cache, const CacheAttendArgs& args,
                                                          const int32_t* first_positions, DecodeScratch& scratch) {
  const KVCacheConfig& c = cache.config();
  const int32_t n = args.new_tokens;
  const int64_t width = int64_t{args.num_heads} * c.head_dim;
  float* q = scratch.staged_q.data();
  // Padding rows are not read: only each sequence's real rows are staged.
  copy_rotated_rows(args.q, c.batch, n, args.new_token_counts, args.num_heads, c.head_dim, args.rope, first_positions,
                    q);
  return TensorView<const float>{q, n * width, width};
}

// Sequences [first, first + batch) of a call, each empty and with `rows` real rows: attention over their
// own new tokens, which are exactly what the cache will hold once appended.
Status tiled_attend(const KVCache& cache, const CacheAttendArgs& args, int32_t first, int32_t batch, int32_t rows,
                    DecodeScratch& scratch, ParallelAttention* parallel, Workspace& tiled_scratch) {
  const Segment segment{first, batch, rows};
  const KVCacheConfig& c = cache.config();
  const int32_t n = segment.rows;
  AttentionArgs tiled = tiled_args(c, args, segment);
  if (c.dtype != CacheDType::kFloat32) {
    const int64_t k_width = int64_t{c.num_kv_heads} * c.head_dim, v_width = int64_t{c.num_kv_heads} * c.value_dim();
    const int64_t k_elements = int64_t{segment.batch} * n * k_width, v_elements = int64_t{segment.batch} * n * v_width;
    if (!scratch.rounded_kv.reserve(static_cast<size_t>(k_elements + v_elements))) return Status::kOutOfMemory;
    const bool rope = args.rope.enabled();
    const int64_t q_width = int64_t{args.num_heads} * c.head_dim;
    if (rope && !scratch.staged_q.reserve(size_t(segment.batch) * n * q_width)) return Status::kOutOfMemory;
    float* k = scratch.rounded_kv.data();
    float* v = k + k_elements;
    rotate_and_round_keys(c, args, segment, k);
    const TensorView<const float> v_in = segment_view(args.v, segment);
    for (int32_t b = 0; b < segment.batch; ++b)
      for (int32_t t = 0; t < n; ++t) {
        round_as_stored(c.dtype, v_in.data + b * v_in.batch_stride + t * v_in.row_stride,
                        v + (int64_t{b} * n + t) * v_width, c.num_kv_heads, c.value_dim());
      }
    tiled.k = dense_view(static_cast<const float*>(k), n, static_cast<int32_t>(k_width));
    tiled.v = dense_view(static_cast<const float*>(v), n, static_cast<int32_t>(v_width));
    if (rope) {  // q rotated at positions [0, n), the kernel then given no rope
      float* q = scratch.staged_q.data();
      copy_rotated_rows(tiled.q, segment.batch, n, nullptr, args.num_heads, c.head_dim, args.rope, nullptr, q);
      tiled.q = TensorView<const float>{q, n * q_width, q_width};
      tiled.rope = RotaryTables{};
    }
  }
  // lse: the stateless call writes (batch, H, rows); the cache call's is (B, H, n). Equal when rows = n;
  // else through scratch, placed below.
  const bool lse_in_place = args.lse == nullptr || n == args.new_tokens;
  if (!lse_in_place && !scratch.tiled_lse.reserve(size_t(segment.batch) * args.num_heads * n)) {
    return Status::kOutOfMemory;
  }
  tiled.lse = args.lse == nullptr ? nullptr
              : lse_in_place      ? cache_lse(args, segment.first, 0, 0)
                                  : scratch.tiled_lse.data();
  const Status run = parallel != nullptr ? parallel->run(tiled) : attention(tiled, tiled_scratch);
  if (run != Status::kOk) return run;
  for (int32_t b = 0; !lse_in_place && b < segment.batch; ++b)
    for (int32_t h = 0; h < args.num_heads; ++h)
      std::copy_n(tiled.lse + (int64_t{b} * args.num_heads + h) * n, n, cache_lse(args, segment.first + b, h, 0));
  if (test_seam::kEnabled) ++scratch.counters.tiled_prefills;
  return Status::kOk;
}

// A prefill into an empty cache whose sequences all have n real rows: once appended, the cache holds
// exactly the new tokens (float16, bfloat16, int8: rounded, after the rotation with rope), so the tiled
// kernel attends over them where they are (other than float32: over a copy of the new keys rotated and
// rounded, and of the values rounded, O(n); q then rotated too and the kernel given no rope), then they are stored.
// Query i sits at position i = old length + i. An error leaves the cache untouched.
Status tiled_prefill(KVCache& cache, const CacheAttendArgs& args, DecodeScratch& scratch, ParallelAttention* parallel,
                     Workspace& tiled_scratch) {
  const Status run =
      tiled_attend(cache, args, 0, cache.config().batch, args.new_tokens, scratch, parallel, tiled_scratch);
  if (run != Status::kOk) return run;
  return cache.append(args.k, args.v, args.new_tokens, &args.rope, args.new_token_counts);
}

}  // namespace mha
