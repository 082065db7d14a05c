// Shapes, strides and status codes shared by every part of the core.
//
// Letters used in every shape comment of this project, outermost first, row-major:
//   B  batch            S  query sequence length     T  key/value sequence length
//   H  number of heads  Hkv key/value heads          Dh head dimension (D / H)
//   Dv value head dimension (v_head_dim; Dh unless set)
//   D  model dimension (d_model = H * Dh; k rows are Hkv * Dh, v rows Hkv * Dv, out rows H * Dv)
#pragma once

#include <cstddef>
#include <cstdint>

namespace mha {

// Errors are values: the core never throws or aborts on bad input, so a WASM instance survives it.
// The numbers are part of the binding ABI (the TypeScript layer maps them to messages).
enum class Status : int32_t {
  kOk = 0,
  kNonPositiveDim = 1,      // batch, seq_len, kv_seq_len, d_model or num_heads <= 0
  kHeadsDoNotDivide = 2,    // d_model % num_heads != 0
  kTooLarge = 3,            // an element count does not fit 32-bit indexing
  kNullPointer = 4,         // a required buffer is missing
  kBadScale = 5,            // scale is NaN or infinite
  kOutOfMemory = 6,         // scratch allocation failed
  kUnsupportedOption = 7,   // an option that does not apply to the function (binding ABI: lse of attention_weights)
  kKvHeadsDoNotDivide = 8,  // num_kv_heads < 0, or not a divisor of num_heads
  kBadQueryOffset = 9,      // query_offset < 0, or query_offset + seq_len beyond int32
  kBadWindow = 10,          // a window bound below -1 (-1 = unbounded)
  kBadKvLength = 11,        // some kv_lengths[b] outside [0, kv_seq_len]
  kBadSoftcap = 12,         // softcap NaN, infinite or negative (0 = none)
  kBadAlibiSlope = 13,      // an ALiBi slope is NaN or infinite
  kBadBiasShape = 14,  // the bias's broadcast dims are not 1 or B and 1 or H (binding ABI), or its strides negative
  kBadEmptyRows = 15,  // empty_rows is neither 'nan' nor 'zero' (binding ABI)
  // The KV cache (kv_cache.hpp).
  kCacheFull = 16,           // appending n tokens would pass the capacity (nothing was written)
  kCacheTooLarge = 17,       // K and V storage beyond kMaxCacheBytes (kv_cache_bytes says how many)
  kCacheInvalid = 18,        // no such cache: never created, already freed, or another instance's
  kCacheBadLength = 19,      // truncate or read outside the stored lengths
  kCacheHeadsMismatch = 20,  // num_heads is not a positive multiple of the cache's num_kv_heads
  kCacheBadDType = 21,       // not a CacheDType (the cache options share the stateless call's statuses)
  // The v0.3 options (docs/spec.md Part 4).
  kBadVHeadDim = 22,   // v_head_dim < 0
  kBadSinks = 23,      // a sink is NaN or infinite
  kBadRotaryDim = 24,  // rotary_dim odd, < 2 or > Dh, or rope tables missing
  kRopePosition = 25,  // a query or key position is not below the rope tables' rows
  kBadStage = 26,      // attention_weights: no such score stage
  // The serving cache (docs/spec.md 4.6, 4.7).
  kCacheBadNewTokens = 27,  // a new_tokens entry outside [0, n]
  kCacheBadSave = 28,       // saved cache bytes that are not exactly what save wrote (kv_cache_io.hpp says why)
  // The cache dtypes (docs/spec.md 4.8).
  kCacheNonFinite = 29,  // an int8 cache asked to store an inf or NaN k or v value (nothing was written)
  // Serving (docs/spec.md Part 5).
  kCacheBadIndices = 30,  // reorder: an index outside [0, B)
  kCacheBadPrefix = 31,   // a prefix of another batch than 1, other dims or dtype, or the cache itself
  kCacheRingWindow = 32,  // a ring attend without a window that keeps every query on stored tokens
  // Long contexts (docs/spec.md 5.1).
  kCacheBadArithmetic = 33,  // integer arithmetic asked of a cache that is not int8 or int4
};
constexpr Status kLastStatus = Status::kCacheBadArithmetic;  // every number in [0, kLastStatus] is a Status

const char* status_name(Status status);

// What a status means in the terms of the JavaScript API (option names, not C++ names): the one source of
// the messages web/src shows; nullptr for a number that is no Status.
const char* status_message(Status status);

// Largest element count of any one tensor; keeps every flat index in int32 range, which is also what
// a wasm32 heap can address as float32.
constexpr int64_t kMaxElements = int64_t{1} << 31;  // exclusive bound: counts must be < 2^31

struct AttentionShape {
  int32_t batch = 0;         // B
  int32_t seq_len = 0;       // S (queries)
  int32_t kv_seq_len = 0;    // T (keys and values)
  int32_t d_model = 0;       // D = H * Dh
  int32_t num_heads = 0;     // H
  int32_t num_kv_heads = 0;  // Hkv, a divisor of H; 0 = H (multi-head attention)
  int32_t v_head_dim = 0;    // Dv; 0 = Dh

  int32_t head_dim() const { return num_heads > 0 ? d_model / num_heads : 0; }
  int32_t value_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim(); }  // Dv
  int32_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  int64_t kv_d_model() const { return int64_t{kv_heads()} * head_dim(); }             // Hkv * Dh: a k row
  int64_t v_d_model() const { return int64_t{kv_heads()} * value_dim(); }             // Hkv * Dv: a v row
  int64_t out_d_model() const { return int64_t{num_heads} * value_dim(); }            // H * Dv: an out row
  int64_t q_elements() const { return int64_t{batch} * seq_len * d_model; }           // (B, S, D)
  int64_t kv_elements() const { return int64_t{batch} * kv_seq_len * kv_d_model(); }  // (B, T, Hkv*Dh)
  int64_t mask_elements() const { return int64_t{batch} * seq_len * kv_seq_len; }     // (B, S, T)
  int64_t weights_elements() const {                                                  // (B, H, S, T)
    return int64_t{batch} * num_heads * seq_len * kv_seq_len;
  }
};

// The (S, T)-sized tensors a call has: attention without a mask forms none (the kernel works on tiles),
// with a mask there is the (B, S, T) mask, attention_weights writes the (B, H, S, T) weights.
enum class ScoreTensor { kNone, kMask, kWeights };

// Checks dims only (no memory is touched): positive dims, D % H == 0, H % Hkv == 0, every tensor the
// call has (q, k, v, out and the `scores` ones) below kMaxElements.
Status validate_shape(const AttentionShape& shape, ScoreTensor scores);

// A (B, rows, D) tensor seen through strides, in elements. Head h of row r of batch b starts at
//   data + b*batch_stride + r*row_stride + h*Dh
// Dense tensors have row_stride = D and batch_stride = rows*D; other strides let callers read a
// sub-block of a larger buffer (e.g. a packed qkv projection) without copying it.
template <typename T>
struct TensorView {
  T* data = nullptr;
  int64_t batch_stride = 0;
  int64_t row_stride = 0;
};

template <typename T>
TensorView<T> dense_view(T* data, int32_t rows, int32_t d_model) {
  return TensorView<T>{data, int64_t{rows} * d_model, d_model};
}

// An additive bias [B or 1, H or 1, S, T] read with strides: bias[b, h, i, j] is
//   data[b*batch_stride + h*head_stride + i*T + j]
// A broadcast dimension has stride 0 (no copies). data == nullptr: no bias.
struct BiasView {
  const float* data = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
};

// Rotary position embedding tables (docs/spec.md 4.5): row p of cos and sin holds position p's
// rotary_dim / 2 factors. A head vector x at position p has its pairs (a, b) = (x[r], x[r + rotary_dim/2])
// (interleaved: (x[2r], x[2r + 1])) turned into (a*c - b*s, b*c + a*s), c = cos[p, r], s = sin[p, r];
// entries from rotary_dim on stay. q rows rotate at their position p_i, k rows at j; v never rotates.
struct RotaryTables {
  const float* cos = nullptr;  // (positions - first_position, rotary_dim / 2); nullptr = no rope
  const float* sin = nullptr;  // (positions - first_position, rotary_dim / 2)
  int32_t positions = 0;       // P: one past the last position the tables hold
  int32_t rotary_dim = 0;      // even, in [2, Dh]
  bool interleaved = false;
  // The position of the tables' first row: 0 for a stateless call (its keys start at 0); a cache attend
  // passes only the rows of its new tokens, [length, length + n), so a decode step copies n rows, not P.
  int32_t first_position = 0;

  bool enabled() const { return cos != nullptr; }
  // Row `position` of cos and sin (first_position <= position < positions, checked by the callers).
  int64_t row_offset(int64_t position) const { return (position - first_position) * (rotary_dim / 2); }
};

// What a row with no visible key (or only -inf scores) yields: NaN (PyTorch <= 2.4) or 0 (SDPA >= 2.5).
enum class EmptyRows : int32_t { kNaN = 0, kZero = 1 };

// The options of an attention call, one struct for the stateless call (AttentionArgs) and the cache call
// (CacheAttendArgs, decode.hpp): what a score is made of, which keys a query sees, and what an empty row
// yields. Their semantics are docs/spec.md Parts 2 and 4, written once in the reference (reference.hpp).
//   score = scale * q_h[i] . k_g[j], then in this order: softcap c: c * tanh(score / c); ALiBi:
//   - slope[h] * |p_i - j|; (stateless only) bias: + bias[b, h, i, j] (-inf hides the key).
// Visibility (src/mha/core/visibility.hpp): (causal) j <= p_i and (window) p_i - window_left <= j <=
// p_i + window_right, p_i the query's position. A row with no visible key (or only -inf scores) is NaN or 0
// in all its outputs (empty_rows); a NaN score makes its row NaN. With rope, q and k are rotated by
// position before the dot product; with sinks, sink[h] is one more logit of every row of head h that has
// no value (the row then never is empty: out 0).
struct AttentionOptions {
  bool causal = false;
  float scale = 0.0f;                   // the caller resolves the 1/sqrt(Dh) default (see default_scale)
  int32_t window_left = -1;             // keys at most this many positions before the query; -1 = unbounded
  int32_t window_right = -1;            // keys at most this many positions after it; -1 = unbounded
  float softcap = 0.0f;                 // c > 0, finite; 0 = none
  const float* alibi_slopes = nullptr;  // (H) finite; nullptr = none
  EmptyRows empty_rows = EmptyRows::kNaN;
  const float* sinks = nullptr;  // (H) finite logits without a value row; nullptr = none
  RotaryTables rope;

  // Whether the visible keys of a row depend on the row (causal or a bounded window).
  bool ranged() const { return causal || window_left >= 0 || window_right >= 0; }
  // The options part of a call struct (both derive from this one).
  AttentionOptions& options() { return *this; }
  const AttentionOptions& options() const { return *this; }
};

// One stateless attention call: its options and its tensors. Semantics: docs/spec.md, and
// src/mha/reference/reference.hpp follows it:
//   for each b, h: out[b, i, h*Dv:(h+1)*Dv] = softmax_j(score(b, h, i, j), visible keys) @ v_g
// with g = h / (H / Hkv) (grouped-query attention reads KV head g by stride, never copied),
// q (B,S,D), k (B,T,Hkv*Dh), v (B,T,Hkv*Dv), out (B,S,H*Dv) (Dv = Dh unless shape.v_head_dim says).
// Beyond the options: key j is visible to query i of batch b only if j < kv_lengths[b] and
// mask[b, i, j] != 0; p_i = query_offset + i is the query's position (key j has position j).
// lse, optional: (B, H, S) log-sum-exp of each row's scores, -inf for an empty row.
struct AttentionArgs : AttentionOptions {
  AttentionShape shape;
  TensorView<const float> q, k, v;
  TensorView<float> out;
  const uint8_t* mask = nullptr;        // (B, S, T) uint8, nonzero = attend; shared by all heads
  int32_t query_offset = 0;             // p_0; >= 0 (T - S: lower-right alignment, a decode step)
  const int32_t* kv_lengths = nullptr;  // (B), each in [0, T]; nullptr = T
  BiasView bias;
  float* lse = nullptr;  // (B, H, S) output, natural log; nullptr = not wanted
};

float default_scale(int32_t head_dim);

// The checks of the options every call shares, for a call of H heads of Dh: kBadScale, kBadWindow,
// kBadSoftcap, kBadEmptyRows, kBadAlibiSlope, kBadSinks (alibi_slopes and sinks are read), then the rope
// tables' own shape (kBadRotaryDim, kTooLarge). Where the call's positions fall in the tables is the
// caller's check (it knows its positions: validate_rope_positions).
Status validate_attention_options(const AttentionOptions& options, int32_t num_heads, int32_t head_dim);

// kRopePosition unless the rope tables (if any) hold the rows of positions [first, last] (last < first:
// none), with the tables' first row at a position in [0, first].
Status validate_rope_positions(const RotaryTables& rope, int64_t first, int64_t last);

// Validates shape, pointers, scale and options of a call (kv_lengths and alibi_slopes are read).
Status validate_args(const AttentionArgs& args);

// The option checks of validate_args alone (no shape or data pointers): what attention_weights shares.
Status validate_options(const AttentionArgs& args);

// Which (B, H, S, T) matrix attention_weights returns (docs/spec.md 4.3; ONNX qk_matmul_output_mode 0-3).
enum class ScoreStage : int32_t {
  kScaled = 0,      // scale * q.k for every (i, j)
  kSoftcapped = 1,  // after softcap, for every (i, j)
  kBiased = 2,      // after ALiBi and bias; -inf where a key is hidden
  kSoftmax = 3,     // the weights
};

}  // namespace mha
