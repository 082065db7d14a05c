#include "mha/core/heads.hpp"

#include <cstring>

namespace mha {

namespace {

Status validate_heads(const void* from, const void* to, int32_t batch, int32_t seq_len, int32_t d_model,
                      int32_t num_heads) {
  AttentionShape shape{batch, seq_len, seq_len, d_model, num_heads};
  const Status status = validate_shape(shape, ScoreTensor::kNone);
  if (status != Status::kOk) return status;
  if (from == nullptr || to == nullptr) return Status::kNullPointer;
  return Status::kOk;
}

// Copies every (b, h, s) run of Dh floats between the two layouts; to_heads picks the direction.
// Both layouts keep each head's Dh floats contiguous, so each run is one memcpy.
void permute_heads(const float* from, float* to, int32_t batch, int32_t seq_len, int32_t d_model, int32_t num_heads,
                   bool to_heads) {
  const int32_t head_dim = d_model / num_heads;
  for (int32_t b = 0; b < batch; ++b) {
    for (int32_t h = 0; h < num_heads; ++h) {
      for (int32_t s = 0; s < seq_len; ++s) {
        const int64_t bsd = (int64_t{b} * seq_len + s) * d_model + int64_t{h} * head_dim;  // (B, S, D)
        const int64_t bhs = ((int64_t{b} * num_heads + h) * seq_len + s) * head_dim;       // (B, H, S, Dh)
        if (to_heads) {
          std::memcpy(to + bhs, from + bsd, sizeof(float) * head_dim);
        } else {
          std::memcpy(to + bsd, from + bhs, sizeof(float) * head_dim);
        }
      }
    }
  }
}

}  // namespace

Status split_heads(const float* x, int32_t batch, int32_t seq_len, int32_t d_model, int32_t num_heads, float* xh) {
  const Status status = validate_heads(x, xh, batch, seq_len, d_model, num_heads);
  if (status == Status::kOk) permute_heads(x, xh, batch, seq_len, d_model, num_heads, true);
  return status;
}

Status merge_heads(const float* xh, int32_t batch, int32_t seq_len, int32_t d_model, int32_t num_heads, float* x) {
  const Status status = validate_heads(xh, x, batch, seq_len, d_model, num_heads);
  if (status == Status::kOk) permute_heads(xh, x, batch, seq_len, d_model, num_heads, false);
  return status;
}

}  // namespace mha
