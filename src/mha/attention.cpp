// TEMPORARY scalar stand-in so the package builds end to end; the xsimd kernel replaces this file.
#include "mha/attention.hpp"

#include <algorithm>

#include "mha/reference.hpp"

namespace mha {

int32_t attention_rows_per_unit(const AttentionShape&) { return 16; }

int64_t attention_unit_count(const AttentionShape& shape) {
  const int32_t rows = attention_rows_per_unit(shape);
  const int64_t blocks = (shape.seq_len + rows - 1) / rows;
  return int64_t{shape.batch} * shape.num_heads * blocks;
}

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

size_t attention_scratch_floats(const AttentionShape&) { return 16; }

void attention_run_unit(const AttentionArgs& args, const WorkUnit& unit, float*) {
  const AttentionShape& s = args.shape;
  const int32_t head_dim = s.head_dim();
  const int64_t head_offset = int64_t{unit.head} * head_dim;
  for (int32_t i = unit.q_begin; i < unit.q_end; ++i) {
    const float* q_row = args.q.data + unit.batch * args.q.batch_stride + i * args.q.row_stride + head_offset;
    float* out_row = args.out.data + unit.batch * args.out.batch_stride + i * args.out.row_stride + head_offset;
    const uint8_t* mask_row =
        args.mask != nullptr ? args.mask + (int64_t{unit.batch} * s.seq_len + i) * s.kv_seq_len : nullptr;
    reference_attention_row(q_row, args.k.data + unit.batch * args.k.batch_stride + head_offset,
                            args.v.data + unit.batch * args.v.batch_stride + head_offset, args.k.row_stride,
                            args.v.row_stride, s.kv_seq_len, head_dim, args.scale, mask_row, args.causal, i,
                            out_row, nullptr);
  }
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
