#include "mha/core/shape.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mha/core/cold.hpp"

namespace mha {

const char* status_name(Status status) {
  switch (status) {
    case Status::kOk: return "ok";
    case Status::kNonPositiveDim: return "non-positive dimension";
    case Status::kHeadsDoNotDivide: return "d_model not divisible by num_heads";
    case Status::kTooLarge: return "tensor too large for 32-bit indexing";
    case Status::kNullPointer: return "missing buffer";
    case Status::kBadScale: return "scale is not finite";
    case Status::kOutOfMemory: return "out of memory";
    case Status::kUnsupportedOption: return "unsupported option";
    case Status::kKvHeadsDoNotDivide: return "num_heads not divisible by num_kv_heads";
    case Status::kBadQueryOffset: return "bad query_offset";
    case Status::kBadWindow: return "bad window";
    case Status::kBadKvLength: return "kv_lengths entry out of range";
    case Status::kBadSoftcap: return "bad softcap";
    case Status::kBadAlibiSlope: return "ALiBi slope not finite";
    case Status::kBadBiasShape: return "bad bias broadcast shape";
    case Status::kBadEmptyRows: return "bad empty_rows";
    case Status::kCacheFull: return "KV cache capacity exceeded";
    case Status::kCacheTooLarge: return "KV cache too large for the heap";
    case Status::kCacheInvalid: return "no such KV cache (freed, or of another instance)";
    case Status::kCacheBadLength: return "length outside the stored lengths";
    case Status::kCacheHeadsMismatch: return "num_heads is not a multiple of the cache's num_kv_heads";
    case Status::kCacheBadDType: return "unknown KV cache dtype";
    case Status::kBadVHeadDim: return "bad v_head_dim";
    case Status::kBadSinks: return "sink not finite";
    case Status::kBadRotaryDim: return "bad rope tables or rotary_dim";
    case Status::kRopePosition: return "position past the rope tables";
    case Status::kBadStage: return "bad score stage";
    case Status::kCacheBadNewTokens: return "new_tokens entry outside [0, n]";
    case Status::kCacheBadSave: return "not a saved KV cache";
    case Status::kCacheNonFinite: return "non-finite value for an int8 or int4 KV cache";
    case Status::kCacheBadIndices: return "reorder index outside [0, batch)";
    case Status::kCacheBadPrefix: return "prefix cache does not match";
    case Status::kCacheRingWindow: return "ring cache attend without a window within its stored tokens";
    case Status::kCacheBadArithmetic: return "integer arithmetic on a cache that is not int8 or int4";
  }
  return "unknown status";
}

const char* status_message(Status status) {
  switch (status) {  // no default: -Wswitch names a Status added without a message
    case Status::kOk: return "ok";
    case Status::kNonPositiveDim: return "a dimension is not positive";
    case Status::kHeadsDoNotDivide: return "dModel is not divisible by numHeads";
    case Status::kTooLarge: return "a tensor is too large for 32-bit indexing";
    case Status::kNullPointer: return "a buffer is missing";
    case Status::kBadScale: return "scale is not finite";
    case Status::kOutOfMemory: return "out of wasm memory for the kernel scratch";
    case Status::kUnsupportedOption:
      return "an option the call sets does not apply to this function (lse is an output of multiHeadAttention only)";
    case Status::kKvHeadsDoNotDivide: return "numKvHeads must be a positive divisor of numHeads";
    case Status::kBadQueryOffset:
      return "queryOffset must be a non-negative integer, with queryOffset + seqLen below 2^31";
    case Status::kBadWindow: return "window bounds must be non-negative integers or Infinity";
    case Status::kBadKvLength: return "every kvLengths entry must be an integer in [0, kvSeqLen]";
    case Status::kBadSoftcap: return "softcap must be a finite number > 0";
    case Status::kBadAlibiSlope: return "every alibiSlopes entry must be finite";
    case Status::kBadBiasShape: return "biasShape must be [1 or batch, 1 or numHeads, seqLen, kvSeqLen]";
    case Status::kBadEmptyRows: return "emptyRows must be 'nan' or 'zero'";
    case Status::kCacheFull: return "the new tokens would pass the KV cache's capacity (nothing was written)";
    case Status::kCacheTooLarge: return "the KV cache's capacity x dims do not fit the 4 GiB wasm heap";
    case Status::kCacheInvalid: return "the KV cache was freed or belongs to another instance";
    case Status::kCacheBadLength:
      return "truncate(n) needs an integer n in [0, max(lengths)], truncate([...]) each entry in [0, lengths[b]], read "
             "an end <= min(lengths)";
    case Status::kCacheHeadsMismatch: return "numHeads must be a positive multiple of the cache's numKvHeads";
    case Status::kCacheBadDType: return "the KV cache dtype is not one this release knows";
    case Status::kBadVHeadDim: return "vHeadDim must be a positive integer";
    case Status::kBadSinks: return "every sinks entry must be finite";
    case Status::kBadRotaryDim: return "rope needs cos and sin tables and an even rotaryDim in [2, headDim]";
    case Status::kRopePosition: return "a query or key position is not below the rope tables' row count";
    case Status::kBadStage: return "stage must be 'scaled', 'softcapped', 'biased' or 'softmax'";
    case Status::kCacheBadNewTokens: return "every newTokens entry must be an integer in [0, n] (n = the rows of q)";
    case Status::kCacheBadSave: return "the bytes are not a KV cache that save() wrote";
    case Status::kCacheNonFinite:
      return "k or v holds an infinite or NaN value (keys after the rotation), which an int8 or int4 cache cannot "
             "quantize (docs/spec.md 4.8); nothing was written";
    case Status::kCacheBadIndices: return "every reorder index must be an integer in [0, batch); nothing moved";
    case Status::kCacheBadPrefix:
      return "a prefix must be another cache with batch 1 and the same numKvHeads, headDim, vHeadDim and dtype; "
             "nothing was stored";
    case Status::kCacheRingWindow:
      return "a ring cache needs a window whose left extent plus the new tokens is at most its capacity, and that "
             "reaches no token it overwrote (docs/spec.md 5.5); nothing was stored";
    case Status::kCacheBadArithmetic: return "integer arithmetic needs an 'int8' or 'int4' cache (docs/spec.md 5.1)";
  }
  return nullptr;
}

MHA_MINSIZE Status validate_shape(const AttentionShape& shape, ScoreTensor scores) {
  if (shape.batch <= 0 || shape.seq_len <= 0 || shape.kv_seq_len <= 0 || shape.d_model <= 0 || shape.num_heads <= 0) {
    return Status::kNonPositiveDim;
  }
  if (shape.d_model % shape.num_heads != 0) return Status::kHeadsDoNotDivide;
  if (shape.num_kv_heads < 0 || shape.num_heads % shape.kv_heads() != 0) return Status::kKvHeadsDoNotDivide;
  if (shape.v_head_dim < 0) return Status::kBadVHeadDim;
  // Each factor is < 2^31, so a product of two fits int64; check step by step so that a product of
  // three or four cannot overflow int64 before it is compared.
  auto fits = [](int64_t a, int64_t b) { return a < kMaxElements && b < kMaxElements && a * b < kMaxElements; };
  const int64_t bs = int64_t{shape.batch} * shape.seq_len;
  const int64_t bt = int64_t{shape.batch} * shape.kv_seq_len;
  if (!fits(bs, shape.d_model) || !fits(bt, shape.kv_d_model())) return Status::kTooLarge;
  if (!fits(bt, shape.v_d_model()) || !fits(bs, shape.out_d_model())) return Status::kTooLarge;
  if (scores != ScoreTensor::kNone && !fits(bs, shape.kv_seq_len)) return Status::kTooLarge;
  if (scores == ScoreTensor::kWeights && !fits(bs * shape.kv_seq_len, shape.num_heads)) return Status::kTooLarge;
  return Status::kOk;
}

float default_scale(int32_t head_dim) {
  // Same rounding as the reference's Python float 1/math.sqrt(head_dim), then cast to float32.
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

namespace {

bool all_finite(const float* x, int32_t n) {
  for (int32_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

// The tables' own shape: both present, rotary_dim even in [2, Dh], rows and size in range.
MHA_MINSIZE Status validate_rope_tables(const RotaryTables& rope, int32_t head_dim) {
  if (!rope.enabled() && rope.sin == nullptr) return Status::kOk;
  if (rope.cos == nullptr || rope.sin == nullptr || rope.rotary_dim < 2 || rope.rotary_dim % 2 != 0 ||
      rope.rotary_dim > head_dim || rope.positions < 0) {
    return Status::kBadRotaryDim;
  }
  if (int64_t{rope.positions} * (rope.rotary_dim / 2) >= kMaxElements) return Status::kTooLarge;
  return Status::kOk;
}

}  // namespace

MHA_MINSIZE Status validate_attention_options(const AttentionOptions& o, int32_t num_heads, int32_t head_dim) {
  if (!std::isfinite(o.scale)) return Status::kBadScale;
  if (o.window_left < -1 || o.window_right < -1) return Status::kBadWindow;
  if (!std::isfinite(o.softcap) || o.softcap < 0.0f) return Status::kBadSoftcap;
  if (o.empty_rows != EmptyRows::kNaN && o.empty_rows != EmptyRows::kZero) return Status::kBadEmptyRows;
  if (o.alibi_slopes != nullptr && !all_finite(o.alibi_slopes, num_heads)) return Status::kBadAlibiSlope;
  if (o.sinks != nullptr && !all_finite(o.sinks, num_heads)) return Status::kBadSinks;
  return validate_rope_tables(o.rope, head_dim);
}

MHA_MINSIZE Status validate_rope_positions(const RotaryTables& rope, int64_t first, int64_t last) {
  if (!rope.enabled() || last < first) return Status::kOk;
  if (rope.first_position < 0 || rope.first_position > first || last >= rope.positions) return Status::kRopePosition;
  return Status::kOk;
}

MHA_MINSIZE Status validate_options(const AttentionArgs& args) {
  const AttentionShape& shape = args.shape;
  const Status options = validate_attention_options(args, shape.num_heads, shape.head_dim());
  if (options != Status::kOk) return options;
  if (args.query_offset < 0 || int64_t{args.query_offset} + shape.seq_len > std::numeric_limits<int32_t>::max()) {
    return Status::kBadQueryOffset;
  }
  if (args.bias.data != nullptr) {
    if (args.bias.batch_stride < 0 || args.bias.head_stride < 0) return Status::kBadBiasShape;
    // The largest element read must stay within 32-bit indexing, as for every other tensor.
    const int64_t last = (shape.batch - 1) * args.bias.batch_stride + (shape.num_heads - 1) * args.bias.head_stride +
                         int64_t{shape.seq_len} * shape.kv_seq_len;
    if (int64_t{shape.seq_len} * shape.kv_seq_len >= kMaxElements || last >= kMaxElements) return Status::kTooLarge;
  }
  if (args.kv_lengths != nullptr) {
    for (int32_t b = 0; b < shape.batch; ++b) {
      if (args.kv_lengths[b] < 0 || args.kv_lengths[b] > shape.kv_seq_len) return Status::kBadKvLength;
    }
  }
  // Every row that rotates must have a table row: queries up to query_offset + S - 1, keys up to T - 1.
  const int64_t last_query = int64_t{args.query_offset} + shape.seq_len - 1;
  return validate_rope_positions(args.rope, 0, std::max<int64_t>(last_query, int64_t{shape.kv_seq_len} - 1));
}

Status validate_args(const AttentionArgs& args) {
  const Status shape_status =
      validate_shape(args.shape, args.mask != nullptr ? ScoreTensor::kMask : ScoreTensor::kNone);
  if (shape_status != Status::kOk) return shape_status;
  if (args.q.data == nullptr || args.k.data == nullptr || args.v.data == nullptr || args.out.data == nullptr) {
    return Status::kNullPointer;
  }
  return validate_options(args);
}

}  // namespace mha
