#include "mha/reference.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace mha {

void reference_attention_row(const float* q_row, const float* k_rows, const float* v_rows,
                             int64_t k_row_stride, int64_t v_row_stride, int32_t kv_seq_len, int32_t head_dim, float scale,
                             const uint8_t* mask_row, bool causal, int32_t query_index, float* out_row,
                             float* weights_row) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  std::vector<double> scores(static_cast<size_t>(kv_seq_len));

  // scores_j = scale * (q . k_j), or -inf where key j is hidden (masked_fill before softmax).
  double row_max = kNegInf;
  for (int32_t j = 0; j < kv_seq_len; ++j) {
    if (!key_visible(mask_row, causal, query_index, j)) {
      scores[j] = kNegInf;
      continue;
    }
    const float* k_row = k_rows + j * k_row_stride;
    double dot = 0.0;
    for (int32_t d = 0; d < head_dim; ++d) dot += double{q_row[d]} * double{k_row[d]};
    scores[j] = dot * double{scale};
    // std::fmax ignores NaN, so a NaN score cannot hide the max; it still poisons the sum below.
    row_max = std::fmax(row_max, scores[j]);
  }

  // Softmax with the row max subtracted, so exp never overflows. An all -inf row has no max to
  // subtract: PyTorch's softmax gives NaN there (exp(-inf - -inf) = exp(NaN)), and so do we.
  const bool row_hidden = (row_max == kNegInf);
  double sum = 0.0;
  for (int32_t j = 0; j < kv_seq_len; ++j) {
    scores[j] = row_hidden ? std::numeric_limits<double>::quiet_NaN() : std::exp(scores[j] - row_max);
    sum += scores[j];
  }

  for (int32_t d = 0; d < head_dim; ++d) {
    double acc = 0.0;
    for (int32_t j = 0; j < kv_seq_len; ++j) {
      // A hidden key is never read, so a non-finite v behind the mask cannot leak into the output
      // (PyTorch would compute 0 * inf = NaN there). Visible keys multiply as usual.
      if (!key_visible(mask_row, causal, query_index, j)) continue;
      acc += scores[j] * double{v_rows[j * v_row_stride + d]};
    }
    out_row[d] = static_cast<float>(acc / sum);
  }
  if (weights_row != nullptr) {
    for (int32_t j = 0; j < kv_seq_len; ++j) weights_row[j] = static_cast<float>(scores[j] / sum);
  }
}

namespace {

// Visits every (b, h, i) of the call, handing the row routine its in-place head slices.
template <typename RowFn>
void for_each_query_row(const AttentionArgs& args, RowFn&& row_fn) {
  const AttentionShape& s = args.shape;
  const int32_t head_dim = s.head_dim();
  for (int32_t b = 0; b < s.batch; ++b) {
    for (int32_t h = 0; h < s.num_heads; ++h) {
      const int64_t head_offset = int64_t{h} * head_dim;
      const float* k_rows = args.k.data + b * args.k.batch_stride + head_offset;
      const float* v_rows = args.v.data + b * args.v.batch_stride + head_offset;
      for (int32_t i = 0; i < s.seq_len; ++i) {
        const float* q_row = args.q.data + b * args.q.batch_stride + i * args.q.row_stride + head_offset;
        const uint8_t* mask_row =
            args.mask != nullptr ? args.mask + (int64_t{b} * s.seq_len + i) * s.kv_seq_len : nullptr;
        row_fn(b, h, i, q_row, k_rows, v_rows, mask_row);
      }
    }
  }
}

}  // namespace

void reference_attention_query(const AttentionArgs& args, int32_t batch, int32_t head, int32_t query) {
  const AttentionShape& s = args.shape;
  const int32_t head_dim = s.head_dim();
  const int64_t head_offset = int64_t{head} * head_dim;
  const uint8_t* mask_row =
      args.mask != nullptr ? args.mask + (int64_t{batch} * s.seq_len + query) * s.kv_seq_len : nullptr;
  reference_attention_row(args.q.data + batch * args.q.batch_stride + query * args.q.row_stride + head_offset,
                          args.k.data + batch * args.k.batch_stride + head_offset,
                          args.v.data + batch * args.v.batch_stride + head_offset, args.k.row_stride,
                          args.v.row_stride, s.kv_seq_len, head_dim, args.scale, mask_row, args.causal, query,
                          args.out.data + batch * args.out.batch_stride + query * args.out.row_stride + head_offset,
                          nullptr);
}

Status reference_attention(const AttentionArgs& args) {
  const Status status = validate_args(args);
  if (status != Status::kOk) return status;
  const int32_t head_dim = args.shape.head_dim();
  for_each_query_row(args, [&](int32_t b, int32_t h, int32_t i, const float* q_row, const float* k_rows,
                               const float* v_rows, const uint8_t* mask_row) {
    float* out_row = args.out.data + b * args.out.batch_stride + i * args.out.row_stride + int64_t{h} * head_dim;
    reference_attention_row(q_row, k_rows, v_rows, args.k.row_stride, args.v.row_stride, args.shape.kv_seq_len, head_dim,
                            args.scale, mask_row, args.causal, i, out_row, nullptr);
  });
  return Status::kOk;
}

Status reference_attention_weights(const AttentionArgs& args, float* weights) {
  Status status = validate_shape(args.shape, ScoreTensor::kWeights);
  if (status != Status::kOk) return status;
  if (args.q.data == nullptr || args.k.data == nullptr || weights == nullptr) return Status::kNullPointer;
  if (!std::isfinite(args.scale)) return Status::kBadScale;
  const AttentionShape& s = args.shape;
  const int32_t head_dim = s.head_dim();
  // v is not needed for the weights: one zero row, read with stride 0, and a scratch output row
  // stand in for it.
  std::vector<float> unused_out(static_cast<size_t>(head_dim));
  std::vector<float> zero_v_row(static_cast<size_t>(head_dim), 0.0f);
  AttentionArgs no_v = args;
  no_v.v = TensorView<const float>{zero_v_row.data(), 0, 0};
  for_each_query_row(no_v, [&](int32_t b, int32_t h, int32_t i, const float* q_row, const float* k_rows,
                               const float*, const uint8_t* mask_row) {
    float* weights_row = weights + ((int64_t{b} * s.num_heads + h) * s.seq_len + i) * s.kv_seq_len;
    reference_attention_row(q_row, k_rows, zero_v_row.data(), args.k.row_stride, 0, s.kv_seq_len, head_dim,
                            args.scale, mask_row, args.causal, i, unused_out.data(), weights_row);
  });
  return Status::kOk;
}

}  // namespace mha
