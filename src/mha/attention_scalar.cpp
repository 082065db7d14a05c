// The portable kernel: the interface of attention.hpp in plain float loops, for wasm engines without
// SIMD128 (the `baseline` build) and for native builds with MHA_SIMD=OFF. It follows the fast kernel
// (attention.cpp) step for step, without its packing and register blocking:
//
// One unit = (batch b, head h, query rows [q_begin, q_end)). For each key tile of Bk keys, per row:
//   1. s (Bk) = scale * (q_i . k_j), keys hidden by the mask or the causal edge set to -inf;
//   2. running max m, p = exp(s - m), running sum l, alpha = exp(m_old - m_new);
//   3. o (Dh) = o * alpha + sum over the visible keys of p_j v_j (hidden keys are skipped, so inf/NaN
//      behind a mask is never read; a visible key is multiplied even when p_j underflowed to 0).
// At the end out = o / l; a row that is not finite (no visible key, non-finite inputs, float32 overflow)
// is recomputed by the reference, so NaN/inf semantics are exactly the reference's.
//
// Determinism: each row's operations depend only on the row and the key tiles (which start at 0 for
// every block), never on the unit split, so results are bit-identical for any split or thread order.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mha/attention.hpp"
#include "mha/reference.hpp"

namespace mha {
namespace {

constexpr int32_t kMaxRowsPerUnit = 64;  // Bq, as the fast kernel
constexpr int32_t kKeysPerTile = 64;     // Bk
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// exp that flushes weights near FLT_MIN to +0 instead of a denormal, as the fast kernel's exp2 does
// (simd_exp.hpp: below 2^-126.5, about e^-87.7), so a weight that underflows is 0 in both kernels (and
// 0 * inf = NaN, see hardening).
constexpr float kExpUnderflow = -87.3f;
inline float exp_flushed(float x) { return x < kExpUnderflow ? 0.0f : std::exp(x); }

constexpr size_t round_up16(size_t x) { return (x + 15) / 16 * 16; }  // keeps every buffer 64-byte aligned

struct Layout {
  size_t s = 0, o = 0, m = 0, l = 0, total = 0;
};

Layout make_layout(const AttentionShape& shape) {
  const size_t rows = static_cast<size_t>(attention_rows_per_unit(shape));
  Layout lay;
  lay.s = 0;                                                       // scores of one row and tile (Bk)
  lay.o = lay.s + round_up16(kKeysPerTile);                        // accumulators (Bq, Dh)
  lay.m = lay.o + round_up16(rows * static_cast<size_t>(shape.head_dim()));  // running max (Bq)
  lay.l = lay.m + round_up16(rows);                                // running sum (Bq)
  lay.total = lay.l + round_up16(rows);
  return lay;
}

}  // namespace

int32_t attention_rows_per_unit(const AttentionShape& shape) {
  return std::min(kMaxRowsPerUnit, std::max(shape.seq_len, 1));
}

size_t attention_scratch_floats(const AttentionShape& shape) { return make_layout(shape).total; }

void attention_run_unit(const AttentionArgs& args, const WorkUnit& unit, float* scratch) {
  const AttentionShape& shape = args.shape;
  const Layout lay = make_layout(shape);
  const int32_t dh = shape.head_dim();
  const int32_t T = shape.kv_seq_len;
  const int32_t rows = unit.q_end - unit.q_begin;

  const auto [q, k, v, out, mask] = unit_views(args, unit);

  float* s = scratch + lay.s;
  float* o_all = scratch + lay.o;
  float* m_all = scratch + lay.m;
  float* l_all = scratch + lay.l;
  std::fill(o_all, o_all + size_t(rows) * dh, 0.0f);
  std::fill(m_all, m_all + rows, kNegInf);
  std::fill(l_all, l_all + rows, 0.0f);

  // Causal: keys >= q_end are hidden from every row of the block.
  const int32_t kv_end = args.causal ? std::min(T, unit.q_end) : T;
  for (int32_t j0 = 0; j0 < kv_end; j0 += kKeysPerTile) {
    const int32_t nk = std::min(kKeysPerTile, T - j0);
    for (int32_t r = 0; r < rows; ++r) {
      const int32_t i = unit.q_begin + r;
      const float* q_row = q + i * args.q.row_stride;
      const uint8_t* mask_row = mask != nullptr ? mask + int64_t{i} * T + j0 : nullptr;
      auto visible = [&](int32_t j) { return key_visible(mask_row, args.causal, i - j0, j); };

      // 1. Scores, hidden keys at -inf, and the tile max (NaN scores do not win the max; they poison
      //    the row through exp below, as in the fast kernel).
      float tile_max = kNegInf;
      for (int32_t j = 0; j < nk; ++j) {
        if (!visible(j)) {
          s[j] = kNegInf;
          continue;
        }
        const float* k_row = k + (j0 + j) * args.k.row_stride;
        float dot = 0.0f;
        for (int32_t d = 0; d < dh; ++d) dot += q_row[d] * k_row[d];
        s[j] = dot * args.scale;
        // q.k overflowed float32 (or an input is not finite): poison l so that the reference recomputes
        // the row instead of an -inf score silently dropping the key.
        if (!std::isfinite(s[j])) l_all[r] = std::numeric_limits<float>::quiet_NaN();
        tile_max = s[j] > tile_max ? s[j] : tile_max;
      }

      // 2. Online softmax step.
      float& m = m_all[r];
      float& l = l_all[r];
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
      float* o = o_all + size_t(r) * dh;
      for (int32_t d = 0; d < dh; ++d) o[d] *= alpha;
      for (int32_t j = 0; j < nk; ++j) {
        if (!visible(j)) continue;
        const float p = s[j];
        const float* v_row = v + (j0 + j) * args.v.row_stride;
        for (int32_t d = 0; d < dh; ++d) o[d] += p * v_row[d];
      }
    }
  }

  for (int32_t r = 0; r < rows; ++r) {
    float* dst = out + (unit.q_begin + r) * args.out.row_stride;
    const float* o = o_all + size_t(r) * dh;
    const float l = l_all[r];
    bool finite = true;
    for (int32_t d = 0; d < dh; ++d) finite &= std::isfinite(o[d] / l);
    // As in the SIMD kernel: non-finite rows get exactly the reference's NaN/inf semantics. Checked
    // before storing, because out may be q itself and the reference reads this row of q.
    if (!finite) {
      reference_attention_query(args, unit.batch, unit.head, unit.q_begin + r);
      continue;
    }
    for (int32_t d = 0; d < dh; ++d) dst[d] = o[d] / l;
  }
}


}  // namespace mha
