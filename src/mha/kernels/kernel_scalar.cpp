// The portable kernel variant mha::scalar: the interface of kernel.hpp in plain float loops, for wasm
// engines without SIMD128 (the `baseline` build). It follows the simd128 variant step for step, without
// its packing and register blocking:
//
// One unit = (batch b, KV head g, query rows [q_begin, q_end)) of the G query heads of g. For each key
// tile of Bk keys that some row of the unit may see (the unit's key range), per head and row:
//   1. s (Bk) = scale * (q_i . k_j), then softcap, ALiBi and bias (docs/spec.md 2.4); keys hidden from the
//      row (kernel-independent rule: visibility.hpp) set to -inf;
//   2. running max m, p = exp(s - m), running sum l, alpha = exp(m_old - m_new);
//   3. o (Dv) = o * alpha + sum over the visible keys of p_j v_j (hidden keys are skipped, so inf/NaN
//      behind a mask is never read; a visible key is multiplied even when p_j underflowed to 0).
// Sinks: a row of head h starts with m = sink[h], l = 1 (the sink's own term), o = 0, so a row without a
// visible key ends with out 0 and lse = sink. Rope: the unit's q rows and each tile's k rows are rotated
// into scratch (rope.hpp) and read from there.
// 4. At the end out = o / l, lse = m + ln l; a row that is not finite (empty rows, non-finite inputs or
//    bias, float32 overflow) is recomputed by the reference, so NaN/inf and empty-row semantics are
//    exactly the reference's.
//
// Determinism: each row's operations depend only on the row and the key tiles (which lie on one grid of
// multiples of Bk for every block; a tile a row skips would only have rescaled by exactly 1 and added
// exact zeros), never on the unit split, so results are bit-identical for any split or thread order.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mha/kernels/kernel.hpp"
#include "mha/core/numeric.hpp"
#include "mha/reference/reference.hpp"
#include "mha/core/rope.hpp"
#include "mha/core/workspace.hpp"

namespace mha {
namespace scalar {
namespace {

constexpr int32_t kRowsPerUnit = 64;
constexpr int32_t kKeysPerTile = 64;

// exp that flushes weights near FLT_MIN to +0 instead of a denormal, as the simd128 variant's exp2 does
// (simd_exp.hpp: below 2^-126.5, about e^-87.7), so a weight that underflows is 0 in both variants (and
// 0 * inf = NaN, see hardening).
constexpr float kExpUnderflow = -87.3f;
inline float exp_flushed(float x) { return x < kExpUnderflow ? 0.0f : std::exp(x); }

KernelPlan plan(const AttentionArgs& args) {
  const AttentionShape& shape = args.shape;
  KernelPlan p;
  p.head_dim = shape.head_dim();
  p.padded_head_dim = p.head_dim;
  p.value_dim = shape.value_dim();
  p.padded_value_dim = p.value_dim;
  p.heads_per_kv_head = shape.num_heads / shape.kv_heads();
  p.rows_per_unit = std::min(kRowsPerUnit, std::max(shape.seq_len, 1));
  p.rows_per_block = p.rows_per_unit;
  p.keys_per_tile = kKeysPerTile;
  count_units(shape, p);
  const size_t rows = size_t(p.heads_per_kv_head) * p.rows_per_unit;
  ScratchLayout& lay = p.scratch;
  ScratchCursor cursor;
  const bool rope = args.rope.enabled();
  lay.q_panels = rope ? cursor.take(rows * size_t(p.head_dim)) : 0;        // rotated q (G*R, Dh)
  lay.k_tile = rope ? cursor.take(size_t(kKeysPerTile) * p.head_dim) : 0;  // rotated k (Bk, Dh)
  lay.scores = cursor.take(kKeysPerTile);                                  // one row's scores of one tile (Bk)
  lay.out_acc = cursor.take(rows * size_t(p.value_dim));                   // (G*R, Dv)
  lay.row_max = cursor.take(rows);                                         // (G*R)
  lay.row_sum = cursor.take(rows);                                         // (G*R)
  lay.reference = cursor.take(2 * reference_scratch_doubles(p.head_dim, p.value_dim, rope));
  lay.total = cursor.at;
  return p;
}

// The score options of one query row of one head (docs/spec.md 2.4).
struct RowScores {
  float scale;
  float softcap;  // 0 = none
  bool alibi;
  float alibi_slope;      // slope[h]
  int64_t position;       // query_offset + i
  const float* bias_row;  // bias[b, h, i, 0..T), or nullptr
};

// One key tile of a unit: k rows of tile keys [0, nk) (as given or rotated), v rows of the keys from 0.
struct KeyTile {
  const float* k;  // key j0 + j at k + j * k_stride (Dh)
  int64_t k_stride;
  const float* v;  // key j at v + j * v_stride (Dv)
  int64_t v_stride;
  int32_t dh, dv, j0, nk;
};

// Steps 1-3 for row i of one head against keys [j0, j0 + nk): `keys` is the part of the tile the row may
// see by range, mask_row its mask (or nullptr).
void attend_tile(const KeyTile& t, const float* q_row, KeyRange keys, const uint8_t* mask_row, const RowScores& row,
                 float* s, float* o, float& m, float& l) {
  const int32_t j0 = t.j0, nk = t.nk, dh = t.dh, dv = t.dv;
  auto visible = [&](int32_t j) {
    return j0 + j >= keys.begin && j0 + j < keys.end && (mask_row == nullptr || mask_row[j0 + j] != 0);
  };
  // 1. Scores, hidden keys at -inf, and the tile max (NaN scores do not win the max; they poison the row
  //    through exp below, as in the simd128 variant).
  float tile_max = kNegInf;
  for (int32_t j = 0; j < nk; ++j) {
    if (!visible(j)) {
      s[j] = kNegInf;
      continue;
    }
    const float* k_row = t.k + j * t.k_stride;
    float dot = 0.0f;
    for (int32_t d = 0; d < dh; ++d) dot += q_row[d] * k_row[d];
    float score = dot * row.scale;
    // q.k overflowed float32 (or an input is not finite): poison l so that the reference recomputes the
    // row instead of an -inf score silently dropping the key. (A -inf bias below hides a key legitimately.)
    if (!std::isfinite(score)) l = std::numeric_limits<float>::quiet_NaN();
    if (row.softcap > 0.0f) score = row.softcap * std::tanh(score / row.softcap);
    if (row.alibi) {
      const int64_t distance = row.position - (j0 + j);
      score -= row.alibi_slope * static_cast<float>(distance < 0 ? -distance : distance);
    }
    if (row.bias_row != nullptr) score += row.bias_row[j0 + j];
    s[j] = score;
    tile_max = score > tile_max ? score : tile_max;
  }

  // 2. Online softmax step.
  const float m_new = tile_max > m ? tile_max : m;
  const float m_sub = (m_new == kNegInf) ? 0.0f : m_new;  // nothing visible yet: exp(-inf) stays 0
  float sum = 0.0f;
  for (int32_t j = 0; j < nk; ++j) {
    s[j] = exp_flushed(s[j] - m_sub);
    sum += s[j];
  }
  const float alpha = exp_flushed(m - m_sub);
  l = l * alpha + sum;
  m = m_new;

  // 3. o = o * alpha + P V over the visible keys.
  for (int32_t d = 0; d < dv; ++d) o[d] *= alpha;
  for (int32_t j = 0; j < nk; ++j) {
    if (!visible(j)) continue;
    const float p = s[j];
    const float* v_row = t.v + (j0 + j) * t.v_stride;
    for (int32_t d = 0; d < dv; ++d) o[d] += p * v_row[d];
  }
}

// The score options of row i of head h of batch item b.
RowScores row_scores(const AttentionArgs& args, int32_t batch, int32_t head, int32_t i) {
  RowScores row{args.scale, args.softcap, args.alibi_slopes != nullptr, 0.0f, int64_t{args.query_offset} + i, nullptr};
  if (row.alibi) row.alibi_slope = args.alibi_slopes[head];
  if (args.bias.data != nullptr) {
    row.bias_row = args.bias.data + batch * args.bias.batch_stride + head * args.bias.head_stride +
                   int64_t{i} * args.shape.kv_seq_len;
  }
  return row;
}

// The unit's q rows of every head rotated at their positions into rq (G*R, Dh), for rope.
void rotate_queries(const AttentionArgs& args, const WorkUnit& unit, const float* q, int32_t heads, int32_t dh,
                    float* rq) {
  const int32_t rows = unit.q_end - unit.q_begin;
  for (int32_t hg = 0; hg < heads; ++hg) {
    for (int32_t r = 0; r < rows; ++r) {
      float* dst = rq + (size_t(hg) * rows + r) * dh;
      std::copy_n(q + (unit.q_begin + r) * args.q.row_stride + hg * dh, dh, dst);
      rotate_head(dst, 1, args.rope, int64_t{args.query_offset} + unit.q_begin + r);
    }
  }
}

// The keys [j0, j0 + nk) of the tile as attend_tile reads them: in place, or rotated at their positions
// into rk (Bk, Dh) with rope.
KeyTile key_tile(const AttentionArgs& args, const KernelPlan& plan, const UnitViews& views, int32_t j0, int32_t nk,
                 float* rk) {
  KeyTile t{views.k + j0 * args.k.row_stride,
            args.k.row_stride,
            views.v,
            args.v.row_stride,
            plan.head_dim,
            plan.value_dim,
            j0,
            nk};
  if (!args.rope.enabled()) return t;
  for (int32_t j = 0; j < nk; ++j) {
    std::copy_n(t.k + j * t.k_stride, t.dh, rk + size_t(j) * t.dh);
    rotate_head(rk + size_t(j) * t.dh, 1, args.rope, j0 + j);
  }
  t.k = rk;
  t.k_stride = t.dh;
  return t;
}

// 4. out = o / l, or the reference's row, for every row of the unit.
void finish_rows(const AttentionArgs& args, const KernelPlan& plan, const WorkUnit& unit, float* out, float* scratch) {
  const int32_t dv = plan.value_dim, heads = plan.heads_per_kv_head;
  const int32_t rows = unit.q_end - unit.q_begin;
  double* reference_acc = reinterpret_cast<double*>(scratch + plan.scratch.reference);
  for (int32_t hg = 0; hg < heads; ++hg) {
    for (int32_t r = 0; r < rows; ++r) {
      const size_t row = size_t(hg) * rows + r;
      float* dst = out + (unit.q_begin + r) * args.out.row_stride + hg * dv;
      const float* o = scratch + plan.scratch.out_acc + row * dv;
      const float l = scratch[plan.scratch.row_sum + row];
      bool finite = true;
      for (int32_t d = 0; d < dv; ++d) finite &= std::isfinite(o[d] / l);
      // As in the simd128 variant: non-finite rows get exactly the reference's NaN/inf semantics. Checked
      // before storing, because out may be q itself and the reference reads this row of q.
      const int32_t head = unit.kv_head * heads + hg;
      if (!finite) {
        reference_attention_query(args, unit.batch, head, unit.q_begin + r, reference_acc);
        continue;
      }
      for (int32_t d = 0; d < dv; ++d) dst[d] = o[d] / l;
      if (args.lse != nullptr) {
        args.lse[(int64_t{unit.batch} * args.shape.num_heads + head) * args.shape.seq_len + unit.q_begin + r] =
            scratch[plan.scratch.row_max + row] + std::log(l);
      }
    }
  }
}

void run_unit(const AttentionArgs& args, const KernelPlan& plan, const WorkUnit& unit, float* scratch) {
  const int32_t dh = plan.head_dim, dv = plan.value_dim;
  const int32_t T = args.shape.kv_seq_len;
  const int32_t rows = unit.q_end - unit.q_begin;
  const int32_t heads = plan.heads_per_kv_head;
  const UnitViews views = unit_views(args, plan, unit);
  const KeyVisibility& vis = views.visibility;

  float* s = scratch + plan.scratch.scores;
  float* o_all = scratch + plan.scratch.out_acc;
  float* m_all = scratch + plan.scratch.row_max;
  float* l_all = scratch + plan.scratch.row_sum;
  const size_t unit_rows = size_t(heads) * rows;
  std::fill(o_all, o_all + unit_rows * dv, 0.0f);
  // Every row of head h starts with its sink's term: m = sink, l = 1 (or nothing: m = -inf, l = 0).
  for (int32_t hg = 0; hg < heads; ++hg) {
    const bool sink = args.sinks != nullptr;
    std::fill_n(m_all + size_t(hg) * rows, rows, sink ? args.sinks[unit.kv_head * heads + hg] : kNegInf);
    std::fill_n(l_all + size_t(hg) * rows, rows, sink ? 1.0f : 0.0f);
  }
  // q rows of head hg at q_rows + hg * head_step + i * q_stride (i from the unit's first row with rope).
  const float* q_rows = views.q + unit.q_begin * args.q.row_stride;
  int64_t q_stride = args.q.row_stride, head_step = dh;
  if (args.rope.enabled()) {
    rotate_queries(args, unit, views.q, heads, dh, scratch + plan.scratch.q_panels);
    q_rows = scratch + plan.scratch.q_panels;
    q_stride = dh;
    head_step = int64_t{rows} * dh;
  }

  // Only the tiles of the grid that meet the unit's key range are visited.
  const KeyRange unit_keys = vis.rows_union(unit.q_begin, unit.q_end);
  const int32_t first_tile = unit_keys.empty() ? 0 : unit_keys.begin / kKeysPerTile * kKeysPerTile;
  for (int32_t j0 = first_tile; j0 < unit_keys.end; j0 += kKeysPerTile) {
    const KeyTile tile = key_tile(args, plan, views, j0, std::min(kKeysPerTile, T - j0), scratch + plan.scratch.k_tile);
    for (int32_t hg = 0; hg < heads; ++hg) {
      for (int32_t r = 0; r < rows; ++r) {
        const int32_t i = unit.q_begin + r;
        const size_t row = size_t(hg) * rows + r;
        attend_tile(tile, q_rows + hg * head_step + r * q_stride, vis.row_range(i), vis.mask_row(i),
                    row_scores(args, unit.batch, unit.kv_head * heads + hg, i), s, o_all + row * dv, m_all[row],
                    l_all[row]);
      }
    }
  }
  finish_rows(args, plan, unit, views.out, scratch);
}

}  // namespace

extern const KernelVariant kKernel;
const KernelVariant kKernel{"scalar", &plan, &run_unit};

}  // namespace scalar
}  // namespace mha
