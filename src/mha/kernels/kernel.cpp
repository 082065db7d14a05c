// What every kernel variant shares: the enumeration of work units, the views of one unit and the
// single-threaded driver. parallel.cpp runs the same units on a pool.
#include "mha/kernels/kernel.hpp"

#include <algorithm>

namespace mha {

void count_units(const AttentionShape& shape, KernelPlan& plan) {
  plan.units_per_kv_head = (shape.seq_len + plan.rows_per_unit - 1) / plan.rows_per_unit;
  const int32_t kv_heads = shape.num_heads / plan.heads_per_kv_head;
  plan.unit_count = int64_t{shape.batch} * kv_heads * plan.units_per_kv_head;
}

WorkUnit plan_unit(const AttentionShape& shape, const KernelPlan& plan, int64_t index) {
  const int64_t blocks = plan.units_per_kv_head;
  const int32_t kv_heads = shape.num_heads / plan.heads_per_kv_head;
  WorkUnit unit;
  unit.batch = static_cast<int32_t>(index / (blocks * kv_heads));
  unit.kv_head = static_cast<int32_t>((index / blocks) % kv_heads);
  unit.q_begin = static_cast<int32_t>((index % blocks) * plan.rows_per_unit);
  unit.q_end = std::min(unit.q_begin + plan.rows_per_unit, shape.seq_len);
  return unit;
}

UnitViews unit_views(const AttentionArgs& args, const KernelPlan& plan, const WorkUnit& unit) {
  const int64_t head_dim = plan.head_dim, value_dim = plan.value_dim;
  const int64_t first_head = int64_t{unit.kv_head} * plan.heads_per_kv_head;
  return UnitViews{
      args.q.data + unit.batch * args.q.batch_stride + first_head * head_dim,
      args.k.data + unit.batch * args.k.batch_stride + unit.kv_head * head_dim,
      args.v.data + unit.batch * args.v.batch_stride + unit.kv_head * value_dim,
      args.out.data + unit.batch * args.out.batch_stride + first_head * value_dim,
      key_visibility(args, unit.batch),
  };
}

Status attention(const AttentionArgs& args, Workspace& workspace, const KernelVariant& kernel) {
  const Status status = validate_args(args);
  if (status != Status::kOk) return status;
  const KernelPlan plan = kernel.plan(args);
  if (!workspace.reserve(plan.scratch.total)) return Status::kOutOfMemory;
  for (int64_t u = 0; u < plan.unit_count; ++u) {
    kernel.run_unit(args, plan, plan_unit(args.shape, plan, u), workspace.data());
  }
  return Status::kOk;
}

}  // namespace mha
