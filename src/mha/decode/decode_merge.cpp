// The decode driver's merge (decode_job.hpp): per (row block, g), the key blocks' partial softmaxes summed
// in block order by their log-sum-exp (the same bits for any thread count), and the rows whose float32
// result is not finite recomputed by the reference over the cache's stored keys and values.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mha/core/numeric.hpp"
#include "mha/decode/decode_job.hpp"
#include "mha/reference/reference.hpp"

namespace mha {
namespace {

// The test seam's count of the rows that took the exact path (test_seam.hpp).
void count_exact_row(const DecodeJob& job) {
  if (test_seam::kEnabled) job.scratch->counters.exact_rows.fetch_add(1, std::memory_order_relaxed);
}

// One KV head of one sequence of the cache, for the reference's reader: elements exactly as stored.
struct CacheHead {
  const KVCache* cache;
  int32_t b, g;
};
float cache_key(const void* head, int32_t j, int32_t d) {
  const CacheHead& h = *static_cast<const CacheHead*>(head);
  return h.cache->key(h.b, h.g, j, d);
}
float cache_value(const void* head, int32_t j, int32_t d) {
  const CacheHead& h = *static_cast<const CacheHead*>(head);
  return h.cache->value(h.b, h.g, j, d);
}

// The exact path of one row: the reference (docs/spec.md in double) over the row's visible keys as the cache
// stores them, q as staged (rotated with rope, as the stored keys, so the row itself takes no rope). Used
// for rows whose float32 result is not finite (non-finite inputs, float32 overflow, empty rows) and for
// scales that cannot be folded into the kernel's log2-unit scale. `scratch`: Dv doubles.
void exact_row(const DecodeJob& job, int32_t b, int32_t g, const RowInfo& ri, double* scratch, float* out, float* lse) {
  const CacheHead head{job.cache, key_sequence(job, b), g};
  ReferenceRow row = call_reference_row(*job.args, ri.head, q_row(job, b, ri), job.head_dim, job.value_dim);
  row.reader = KeyValueReader{&head, &cache_key, &cache_value};
  row.visibility.kv_seq_len = job.lengths[b];
  row.visibility.kv_length = job.lengths[b];
  row.visibility.query_offset = job.first_positions[b];
  row.query = ri.query;
  reference_attention_row(row, scratch, out, nullptr, lse);
}

}  // namespace

void merge_row_block(void* ctx, int64_t index, int worker) {
  const DecodeJob& job = *static_cast<const DecodeJob*>(ctx);
  const int32_t heads = job.cache->config().num_kv_heads;
  const DecodeRowBlock& rb = job.row_blocks[index / heads];
  const int32_t g = static_cast<int32_t>(index % heads);
  const int32_t dv = job.value_dim, dv8 = job.dv8;
  const float* sinks = job.args->sinks;
  float* merged = job.scratch->workers[static_cast<size_t>(worker)].data();  // (Dv8)
  double* exact_scratch = reinterpret_cast<double*>(merged + dv8);           // (Dv): dv8 floats keep it aligned
  const TensorView<float>& out = job.args->out;
  for (int32_t r = 0; r < rb.rows; ++r) {
    const RowInfo ri = row_info(job, rb, g, r);
    const int32_t b = ri.batch;
    float* dst = out.data + b * out.batch_stride + ri.query * out.row_stride + int64_t{ri.head} * dv;
    float* lse = job.args->lse != nullptr ? cache_lse(*job.args, b, ri.head, ri.query) : nullptr;
    if (job.exact_only || rb.blocks == 0) {
      exact_row(job, b, g, ri, exact_scratch, dst, lse);
      count_exact_row(job);
      continue;
    }
    // The sink is one more partial: m = sink * log2(e), l = 1, o = 0 (merged after the key blocks).
    const float sink = sinks != nullptr ? static_cast<float>(double{sinks[ri.head]} * kLog2e) : kNegInf;
    float m = sink;
    for (int32_t k = 0; k < rb.blocks; ++k) m = std::max(m, partial_at(job, rb, g, rb.first_block + k).m[r]);
    const float m_sub = m == kNegInf ? 0.0f : m;
    float l = 0.0f;
    std::fill(merged, merged + dv8, 0.0f);
    for (int32_t k = 0; k < rb.blocks; ++k) {
      const Partial p = partial_at(job, rb, g, rb.first_block + k);
      const float weight = std::exp2(p.m[r] - m_sub);  // 1 for the block holding the max
      l += p.l[r] * weight;
      const float* o = p.o + int64_t{r} * dv8;
      for (int32_t d = 0; d < dv8; ++d) merged[d] += o[d] * weight;
    }
    if (sinks != nullptr) l += std::exp2(sink - m_sub);
    // A row that saw a visible key has l >= 1 (its max key adds 2^0 = 1). Checked before storing: out may
    // be q, and the exact path reads this row of q.
    bool finite = l >= 1.0f && l <= std::numeric_limits<float>::max();
    for (int32_t d = 0; d < dv; ++d) {
      merged[d] /= l;
      finite &= std::isfinite(merged[d]);
    }
    if (!finite) {
      exact_row(job, b, g, ri, exact_scratch, dst, lse);
      count_exact_row(job);
      continue;
    }
    std::copy(merged, merged + dv, dst);
    if (lse != nullptr) *lse = natural_lse(m_sub, l, job.cache->config().integer);
  }
}

}  // namespace mha
