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

Status attention(const AttentionArgs& args, Workspace& workspace) {
  const Status status = validate_args(args);
  if (status != Status::kOk) return status;
  if (!workspace.reserve(attention_scratch_floats(args.shape))) return Status::kOutOfMemory;
  const int64_t units = attention_unit_count(args.shape);
  for (int64_t u = 0; u < units; ++u) attention_run_unit(args, attention_unit(args.shape, u), workspace.data());
  return Status::kOk;
}

}  // namespace mha
