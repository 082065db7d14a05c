// Shapes, strides and status codes shared by every part of the core.
//
// Letters used in every shape comment of this project, outermost first, row-major:
//   B  batch            S  query sequence length     T  key/value sequence length
//   H  number of heads  Hkv key/value heads          Dh head dimension (D / H)
//   D  model dimension (d_model = H * Dh; k and v rows are Hkv * Dh)
#pragma once

#include <cstddef>
#include <cstdint>

namespace mha {

// Errors are values: the core never throws or aborts on bad input, so a WASM instance survives it.
// The numbers are part of the binding ABI (the TypeScript layer maps them to messages).
enum class Status : int32_t {
  kOk = 0,
  kNonPositiveDim = 1,     // batch, seq_len, kv_seq_len, d_model or num_heads <= 0
  kHeadsDoNotDivide = 2,   // d_model % num_heads != 0
  kTooLarge = 3,           // an element count does not fit 32-bit indexing
  kNullPointer = 4,        // a required buffer is missing
  kBadScale = 5,           // scale is NaN or infinite
  kOutOfMemory = 6,        // scratch allocation failed
  kUnsupportedOption = 7,  // the call sets an option that does not apply to the function (binding ABI: lse of attention_weights)
  kKvHeadsDoNotDivide = 8, // num_kv_heads < 0, or not a divisor of num_heads
  kBadQueryOffset = 9,     // query_offset < 0, or query_offset + seq_len beyond int32
  kBadWindow = 10,         // a window bound below -1 (-1 = unbounded)
  kBadKvLength = 11,       // some kv_lengths[b] outside [0, kv_seq_len]
  kBadSoftcap = 12,        // softcap NaN, infinite or negative (0 = none)
  kBadAlibiSlope = 13,     // an ALiBi slope is NaN or infinite
  kBadBiasShape = 14,      // the bias's broadcast dims are not 1 or B and 1 or H (binding ABI), or its strides negative
  kBadEmptyRows = 15,      // empty_rows is neither 'nan' nor 'zero' (binding ABI)
  // The KV cache (kv_cache.hpp).
  kCacheFull = 16,           // appending n tokens would pass the capacity (nothing was written)
  kCacheTooLarge = 17,       // K and V storage beyond kMaxCacheBytes (kv_cache_bytes says how many)
  kCacheInvalid = 18,        // no such cache: never created, already freed, or another instance's
  kCacheBadLength = 19,      // truncate to a length outside [0, length]
  kCacheHeadsMismatch = 20,  // num_heads is not a positive multiple of the cache's num_kv_heads
  kCacheBadOption = 21,      // window bound < -1, softcap not finite or < 0, a non-finite ALiBi slope, bad dtype
};

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

  int32_t head_dim() const { return num_heads > 0 ? d_model / num_heads : 0; }
  int32_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  int64_t kv_d_model() const { return int64_t{kv_heads()} * head_dim(); }          // Hkv * Dh: a k/v row
  int64_t q_elements() const { return int64_t{batch} * seq_len * d_model; }      // (B, S, D)
  int64_t kv_elements() const { return int64_t{batch} * kv_seq_len * kv_d_model(); }  // (B, T, Hkv*Dh)
  int64_t mask_elements() const { return int64_t{batch} * seq_len * kv_seq_len; }  // (B, S, T)
  int64_t weights_elements() const {                                              // (B, H, S, T)
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

// What a row with no visible key (or only -inf scores) yields: NaN (PyTorch <= 2.4) or 0 (SDPA >= 2.5).
enum class EmptyRows : int32_t { kNaN = 0, kZero = 1 };

// Everything one attention call needs. Semantics: docs/spec.md, and src/mha/reference.hpp follows it:
//   for each b, h: out[b, i, h*Dh:(h+1)*Dh] = softmax_j(score(b, h, i, j), visible keys) @ v_g
// with g = h / (H / Hkv) (grouped-query attention reads KV head g by stride, never copied),
// q (B,S,D), k (B,T,Hkv*Dh), v (B,T,Hkv*Dh), out (B,S,D).
// Visibility (src/mha/visibility.hpp): key j is visible to query i of batch b iff j < kv_lengths[b],
//   mask[b, i, j] != 0, (causal) j <= p_i and (window) p_i - window_left <= j <= p_i + window_right, where
//   p_i = query_offset + i is the query's position (key j has position j).
// score = scale * q_h[i] . k_g[j], then in this order: softcap c: c * tanh(score / c); ALiBi:
//   - slope[h] * |p_i - j|; bias: + bias[b, h, i, j] (-inf hides the key).
// A query row with no visible key (or only -inf scores) is NaN or 0 in all its outputs (empty_rows); a
// NaN score makes its row NaN. lse, optional: (B, H, S) log-sum-exp of each row's scores, -inf for an
// empty row.
struct AttentionArgs {
  AttentionShape shape;
  TensorView<const float> q, k, v;
  TensorView<float> out;
  const uint8_t* mask = nullptr;  // (B, S, T) uint8, nonzero = attend; shared by all heads
  bool causal = false;
  float scale = 0.0f;  // the caller resolves the 1/sqrt(Dh) default (see default_scale)
  int32_t query_offset = 0;             // p_0; >= 0 (T - S: lower-right alignment, a decode step)
  const int32_t* kv_lengths = nullptr;  // (B), each in [0, T]; nullptr = T
  int32_t window_left = -1;             // keys at most this many positions before the query; -1 = unbounded
  int32_t window_right = -1;            // keys at most this many positions after it; -1 = unbounded
  float softcap = 0.0f;                 // c > 0, finite; 0 = none
  const float* alibi_slopes = nullptr;  // (H) finite; nullptr = none
  BiasView bias;
  EmptyRows empty_rows = EmptyRows::kNaN;
  float* lse = nullptr;                 // (B, H, S) output, natural log; nullptr = not wanted

  // Whether the visible keys of a row depend on the row (causal or a bounded window).
  bool ranged() const { return causal || window_left >= 0 || window_right >= 0; }
};

float default_scale(int32_t head_dim);

// Validates shape, pointers, scale and options of a call (kv_lengths and alibi_slopes are read).
Status validate_args(const AttentionArgs& args);

// The option checks of validate_args alone (no shape or data pointers): what attention_weights shares.
Status validate_options(const AttentionArgs& args);

}  // namespace mha
