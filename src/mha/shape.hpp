// Shapes, strides and status codes shared by every part of the core.
//
// Letters used in every shape comment of this project, outermost first, row-major:
//   B  batch            S  query sequence length     T  key/value sequence length
//   H  number of heads  Dh head dimension (D / H)    D  model dimension (d_model)
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
  // The KV cache (kv_cache.hpp), numbered apart so that other new codes can take 7 and up.
  kCacheFull = 32,           // appending n tokens would pass the capacity (nothing was written)
  kCacheTooLarge = 33,       // K and V storage beyond kMaxCacheBytes (kv_cache_bytes says how many)
  kCacheInvalid = 34,        // no such cache: never created, already freed, or another instance's
  kCacheBadLength = 35,      // truncate to a length outside [0, length]
  kCacheHeadsMismatch = 36,  // num_heads is not a positive multiple of the cache's num_kv_heads
  kCacheBadOption = 37,      // window bound < -1, softcap not finite or < 0, a non-finite ALiBi slope, bad dtype
};

const char* status_name(Status status);

// Largest element count of any one tensor; keeps every flat index in int32 range, which is also what
// a wasm32 heap can address as float32.
constexpr int64_t kMaxElements = int64_t{1} << 31;  // exclusive bound: counts must be < 2^31

struct AttentionShape {
  int32_t batch = 0;       // B
  int32_t seq_len = 0;     // S (queries)
  int32_t kv_seq_len = 0;  // T (keys and values)
  int32_t d_model = 0;     // D
  int32_t num_heads = 0;   // H

  int32_t head_dim() const { return num_heads > 0 ? d_model / num_heads : 0; }
  int64_t q_elements() const { return int64_t{batch} * seq_len * d_model; }      // (B, S, D)
  int64_t kv_elements() const { return int64_t{batch} * kv_seq_len * d_model; }  // (B, T, D)
  int64_t mask_elements() const { return int64_t{batch} * seq_len * kv_seq_len; }  // (B, S, T)
  int64_t weights_elements() const {                                              // (B, H, S, T)
    return int64_t{batch} * num_heads * seq_len * kv_seq_len;
  }
};

// The (S, T)-sized tensors a call has: attention without a mask forms none (the kernel works on tiles),
// with a mask there is the (B, S, T) mask, attention_weights writes the (B, H, S, T) weights.
enum class ScoreTensor { kNone, kMask, kWeights };

// Checks dims only (no memory is touched): positive dims, D % H == 0, every tensor the call has
// (q, k, v, out and the `scores` ones) below kMaxElements.
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

// Everything one attention call needs. Semantics (the spec, and src/mha/reference.hpp):
//   for each b, h: out[b, i, h*Dh:(h+1)*Dh] = softmax_j(scale * q_h[i] . k_h[j], masked) @ v_h
// q (B,S,D), k (B,T,D), v (B,T,D), out (B,S,D).
// mask (B,S,T) uint8, optional: nonzero = attend; shared by all heads.
// causal: key j visible to query i iff j <= i (upper-left aligned when S != T); combined with mask
//         by AND. A query row with no visible key yields NaN in all its outputs, as PyTorch does.
struct AttentionArgs {
  AttentionShape shape;
  TensorView<const float> q, k, v;
  TensorView<float> out;
  const uint8_t* mask = nullptr;
  bool causal = false;
  float scale = 0.0f;  // the caller resolves the 1/sqrt(Dh) default (see default_scale)
};

float default_scale(int32_t head_dim);

// Validates shape, pointers and scale of a call.
Status validate_args(const AttentionArgs& args);

// True when key j is visible to query i under the causal flag and the mask (nullptr = no mask).
// mask_row points at mask[b, i, 0].
inline bool key_visible(const uint8_t* mask_row, bool causal, int32_t i, int32_t j) {
  if (causal && j > i) return false;
  return mask_row == nullptr || mask_row[j] != 0;
}

}  // namespace mha
