// What every kernel shares: the enumeration of work units and the single-threaded driver. A kernel
// (attention.cpp with SIMD, attention_scalar.cpp without) supplies attention_rows_per_unit,
// attention_scratch_floats and attention_run_unit; parallel.cpp runs the same units on a pool.
#include <algorithm>

#include "mha/attention.hpp"

namespace mha {

int64_t attention_unit_count(const AttentionShape& shape) {
  const int32_t rows = attention_rows_per_unit(shape);
  const int64_t blocks = (shape.seq_len + rows - 1) / rows;
  return int64_t{shape.batch} * shape.num_heads * blocks;
}

// Batch-major, then head, then query block, so consecutive units share a batch item's K/V.
WorkUnit attention_unit(const AttentionShape& shape, int64_t index) {
  const int32_t rows = attention_rows_per_unit(shape);
  const int64_t blocks = (shape.seq_len + rows - 1) / rows;
  WorkUnit unit;
  unit.batch = static_cast<int32_t>(index / (blocks * shape.num_heads));
  unit.head = static_cast<int32_t>((index / blocks) % shape.num_heads);
  unit.q_begin = static_cast<int32_t>((index % blocks) * rows);
  unit.q_end = std::min(unit.q_begin + rows, shape.seq_len);
  return unit;
}

UnitViews unit_views(const AttentionArgs& args, const WorkUnit& unit) {
  const AttentionShape& shape = args.shape;
  const int64_t head_dim = shape.head_dim();
  const int32_t kv_head = unit.head;
  return UnitViews{
      args.q.data + unit.batch * args.q.batch_stride + unit.head * head_dim,
      args.k.data + unit.batch * args.k.batch_stride + kv_head * head_dim,
      args.v.data + unit.batch * args.v.batch_stride + kv_head * head_dim,
      args.out.data + unit.batch * args.out.batch_stride + unit.head * head_dim,
      args.mask != nullptr ? args.mask + int64_t{unit.batch} * shape.seq_len * shape.kv_seq_len : nullptr,
  };
}

Status attention(const AttentionArgs& args, Workspace& workspace) {
  const Status status = validate_args(args);
  if (status != Status::kOk) return status;
  if (!workspace.reserve(attention_scratch_floats(args.shape))) return Status::kOutOfMemory;
  const int64_t units = attention_unit_count(args.shape);
  for (int64_t u = 0; u < units; ++u) attention_run_unit(args, attention_unit(args.shape, u), workspace.data());
  return Status::kOk;
}

}  // namespace mha
