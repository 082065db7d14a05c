// A cache call computed in two parts over disjoint keys (a shared prefix and the sequences' own tokens,
// decode_prefix.cpp; a ring's two runs of slots, decode_ring.cpp), each a pass of the decode driver that
// gives attention states (docs/spec.md 5.3), and their merge by log-sum-exp with the sink.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mha/core/cold.hpp"
#include "mha/core/numeric.hpp"
#include "mha/decode/decode_job.hpp"

namespace mha {
namespace {

constexpr float kLog2ef = static_cast<float>(kLog2e);

}  // namespace

namespace {

CacheAttendArgs part_args(const CacheAttendArgs& args, TensorView<const float> staged_q, TensorView<float> out,
                          float* lse) {
  CacheAttendArgs part = args;
  part.prefix = nullptr;
  part.q = staged_q;
  part.out = out;
  part.lse = lse;
  part.sinks = nullptr;
  part.empty_rows = EmptyRows::kZero;
  part.rope = RotaryTables{};
  return part;
}

}  // namespace

MHA_MINSIZE Status stage_parts(const KVCache& cache, const CacheAttendArgs& args, const RotaryTables& rope,
                               const int32_t* first_positions, DecodeScratch& scratch, CallParts& parts) {
  const KVCacheConfig& c = cache.config();
  const int64_t out_floats = int64_t{c.batch} * args.new_tokens * args.num_heads * c.value_dim();
  const int64_t lse_floats = int64_t{c.batch} * args.num_heads * args.new_tokens;
  const size_t q_floats = size_t(c.batch) * args.new_tokens * args.num_heads * c.head_dim;
  if (!scratch.staged_q.reserve(q_floats) || !scratch.prefix_states.reserve(size_t(out_floats + 2 * lse_floats)))
    return Status::kOutOfMemory;
  CacheAttendArgs staging = args;
  staging.rope = rope;
  parts.staged_q = stage_rotated_q(cache, staging, first_positions, scratch);
  float* const states = scratch.prefix_states.data();
  parts.first_out = states;
  parts.first_lse = states + out_floats;
  parts.second_lse = states + out_floats + lse_floats;
  // The first part's out is dense (B, n, H*Dv) in the staging, whatever the strides of the caller's out.
  const int64_t out_row = int64_t{args.num_heads} * c.value_dim();
  parts.first = part_args(args, parts.staged_q, TensorView<float>{states, args.new_tokens * out_row, out_row},
                          states + out_floats);
  parts.second = part_args(args, parts.staged_q, args.out, states + out_floats + lse_floats);
  return Status::kOk;
}

MHA_MINSIZE ReferenceRow call_reference_row(const CacheAttendArgs& args, int32_t h, const float* q, int32_t head_dim,
                                            int32_t value_dim) {
  ReferenceRow row;
  row.q_row = q;
  row.head_dim = head_dim;
  row.value_dim = value_dim;
  row.scale = args.scale;
  row.visibility.causal = args.causal;
  row.visibility.window_left = args.window_left;
  row.visibility.window_right = args.window_right;
  row.softcap = args.softcap;
  row.alibi = args.alibi_slopes != nullptr;
  row.alibi_slope = row.alibi ? args.alibi_slopes[h] : 0.0f;
  row.empty_rows = args.empty_rows;
  row.has_sink = args.sinks != nullptr;
  row.sink = row.has_sink ? args.sinks[h] : 0.0f;
  return row;
}

// In log2 units, with the exp2 and log2 of the decode merge (natural_lse). A NaN lse (a part's NaN row) or
// a result that is not finite goes to the exact row.
MHA_MINSIZE void merge_parts(const PartsMerge& merge, const CallParts& parts, ExactPartsRow exact_row,
                             DecodeScratch& scratch) {
  const CacheAttendArgs& args = *merge.args;
  const KVCacheConfig& c = merge.cache->config();
  const int32_t dv = c.value_dim();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // reserve_decode keeps Dv * 3 floats in each worker's scratch: room for the exact row's Dv doubles.
  double* exact_scratch = reinterpret_cast<double*>(scratch.workers[0].data());
  const TensorView<const float>& q_all = parts.staged_q;
  for (int32_t b = 0; b < c.batch; ++b)
    for (int32_t i = 0; i < new_token_count(args, b); ++i)
      for (int32_t h = 0; h < args.num_heads; ++h) {
        const int64_t state = (int64_t{b} * args.num_heads + h) * args.new_tokens + i;
        float* dst = args.out.data + b * args.out.batch_stride + i * args.out.row_stride + int64_t{h} * dv;
        const float* first_out =
            parts.first_out + (int64_t{b} * args.new_tokens + i) * args.num_heads * dv + int64_t{h} * dv;
        const float first_m = parts.first_lse[state] * kLog2ef, second_m = parts.second_lse[state] * kLog2ef;
        const float sink = args.sinks != nullptr ? args.sinks[h] * kLog2ef : kNegInf;
        const float m = std::max({first_m, second_m, sink});
        float* lse = args.lse != nullptr ? args.lse + state : nullptr;
        const float* q = q_all.data + b * q_all.batch_stride + i * q_all.row_stride + int64_t{h} * c.head_dim;
        if (std::isnan(first_m) || std::isnan(second_m)) {  // std::max would skip a NaN
          exact_row(merge, b, i, h, q, exact_scratch, dst, lse);
          continue;
        }
        if (m == kNegInf) {  // no visible key and no sink: an empty row
          std::fill_n(dst, dv, args.empty_rows == EmptyRows::kZero ? 0.0f : nan);
          if (lse != nullptr) *lse = kNegInf;
          continue;
        }
        const float first_weight = std::exp2(first_m - m), second_weight = std::exp2(second_m - m);
        const float l = first_weight + second_weight + std::exp2(sink - m);
        bool finite = std::isfinite(m) && l >= 1.0f && l <= std::numeric_limits<float>::max();
        for (int32_t d = 0; d < dv; ++d) {
          dst[d] = (first_out[d] * first_weight + dst[d] * second_weight) / l;
          finite &= std::isfinite(dst[d]);
        }
        if (lse != nullptr) *lse = natural_lse(m, l, c.integer);
        if (!finite) exact_row(merge, b, i, h, q, exact_scratch, dst, lse);
      }
  zero_padding_rows(*merge.cache, args);
}

}  // namespace mha
