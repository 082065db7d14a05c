#include "mha/shape.hpp"

#include <cmath>

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
    case Status::kCacheFull: return "KV cache capacity exceeded";
    case Status::kCacheTooLarge: return "KV cache too large for the heap";
    case Status::kCacheInvalid: return "no such KV cache (freed, or of another instance)";
    case Status::kCacheBadLength: return "truncate length outside [0, length]";
    case Status::kCacheHeadsMismatch: return "num_heads is not a multiple of the cache's num_kv_heads";
    case Status::kCacheBadOption: return "bad KV cache option";
  }
  return "unknown status";
}

Status validate_shape(const AttentionShape& shape, ScoreTensor scores) {
  if (shape.batch <= 0 || shape.seq_len <= 0 || shape.kv_seq_len <= 0 || shape.d_model <= 0 ||
      shape.num_heads <= 0) {
    return Status::kNonPositiveDim;
  }
  if (shape.d_model % shape.num_heads != 0) return Status::kHeadsDoNotDivide;
  // Each factor is < 2^31, so a product of two fits int64; check step by step so that a product of
  // three or four cannot overflow int64 before it is compared.
  auto fits = [](int64_t a, int64_t b) { return a < kMaxElements && b < kMaxElements && a * b < kMaxElements; };
  const int64_t bs = int64_t{shape.batch} * shape.seq_len;
  const int64_t bt = int64_t{shape.batch} * shape.kv_seq_len;
  if (!fits(bs, shape.d_model) || !fits(bt, shape.d_model)) return Status::kTooLarge;
  if (scores != ScoreTensor::kNone && !fits(bs, shape.kv_seq_len)) return Status::kTooLarge;
  if (scores == ScoreTensor::kWeights && !fits(bs * shape.kv_seq_len, shape.num_heads)) return Status::kTooLarge;
  return Status::kOk;
}

float default_scale(int32_t head_dim) {
  // Same rounding as the reference's Python float 1/math.sqrt(head_dim), then cast to float32.
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

Status validate_args(const AttentionArgs& args) {
  const Status shape_status = validate_shape(args.shape, args.mask != nullptr ? ScoreTensor::kMask : ScoreTensor::kNone);
  if (shape_status != Status::kOk) return shape_status;
  if (args.q.data == nullptr || args.k.data == nullptr || args.v.data == nullptr ||
      args.out.data == nullptr) {
    return Status::kNullPointer;
  }
  if (!std::isfinite(args.scale)) return Status::kBadScale;
  return Status::kOk;
}

}  // namespace mha
