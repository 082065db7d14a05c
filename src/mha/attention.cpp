// The fast attention kernel: FlashAttention-style tiling with an online softmax, xsimd micro-kernels.
//
// One unit = (batch b, head h, query rows [q_begin, q_end)). For each key tile of Bk keys:
//   1. pack K^T (Dh, Bk) and V (Bk, Dh8) of head h into aligned scratch (Dh8 = Dh rounded up to 8,
//      zero padded), so the micro-kernels only ever see whole vectors;
//   2. S (Bq, Bk) = Q K^T with a 4 rows x 8 keys register-blocked micro-kernel;
//   3. per query row: scale, hide masked/causal keys (-inf), running max m, p = exp(s - m), running sum l;
//   4. O (Bq, Dh8) = O * exp(m_old - m_new) + P V with a 4 rows x 8 lanes micro-kernel.
// At the end out = O / l. Nothing of size S x T exists; scratch depends on Dh and the fixed tile only.
//
// Determinism: every query row goes through exactly the same float operations whatever block it is in
// (the key tiles start at 0 for every block, the 4-row micro-kernels treat rows independently, skipped
// tiles would only have added exact zeros), so results do not depend on the unit split or order.
#include "mha/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "mha/simd_exp.hpp"

namespace mha {
namespace {

using simd::VecF;
constexpr int kLanes = 4;  // f32x4: SSE4.2 natively, SIMD128 in wasm
static_assert(VecF::size == kLanes, "the micro-kernels are written for 4-lane vectors");

constexpr int32_t kMaxRowsPerUnit = 64;  // Bq
constexpr int32_t kMaxKeysPerTile = 64;  // Bk
constexpr int32_t kMr = 4;               // query rows per micro-kernel
constexpr int32_t kNr = 8;               // keys (QK^T) or output lanes (PV) per micro-kernel

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

constexpr int32_t round_up(int32_t x, int32_t m) { return (x + m - 1) / m * m; }
constexpr size_t round_up16(size_t x) { return (x + 15) / 16 * 16; }  // 64-byte multiples of floats

int32_t keys_per_tile(const AttentionShape& shape) { return std::min(kMaxKeysPerTile, round_up(shape.kv_seq_len, kNr)); }

// Where each buffer of a unit lives in the worker's scratch (offsets in floats, all 64-byte aligned).
struct Layout {
  int32_t dh = 0;   // head dim
  int32_t dh8 = 0;  // head dim rounded up to kNr (row length of packed V and of O)
  int32_t bq = 0;   // rows per unit
  int32_t bk = 0;   // keys per tile
  size_t q = 0, kt = 0, v = 0, s = 0, o = 0, m = 0, l = 0, alpha = 0, total = 0;
};

Layout make_layout(const AttentionShape& shape) {
  Layout lay;
  lay.dh = shape.head_dim();
  lay.dh8 = round_up(lay.dh, kNr);
  lay.bq = attention_rows_per_unit(shape);
  lay.bk = keys_per_tile(shape);
  const size_t bq4 = static_cast<size_t>(round_up(lay.bq, kMr));
  size_t at = 0;
  auto take = [&at](size_t floats) {
    const size_t here = at;
    at += round_up16(floats);
    return here;
  };
  lay.q = take(bq4 * lay.dh);                         // Q block (Bq, Dh), unscaled
  lay.kt = take(size_t(lay.dh) * lay.bk);             // K tile transposed (Dh, Bk)
  lay.v = take(size_t(lay.bk) * lay.dh8);             // V tile (Bk, Dh8)
  lay.s = take(bq4 * lay.bk);                         // scores / probabilities (Bq, Bk)
  lay.o = take(bq4 * lay.dh8);                        // output accumulators (Bq, Dh8)
  lay.m = take(bq4);                                  // running max per row
  lay.l = take(bq4);                                  // running sum per row
  lay.alpha = take(bq4);                              // this tile's rescale factor per row
  lay.total = at;
  return lay;
}

// ---------------------------------------------------------------------------------------------------
// Packing

// K rows [0, nk) of the tile -> kt (Dh, bk); keys [nk, round_up(nk, kNr)) are zero.
void pack_k_transposed(const float* k, int64_t row_stride, int32_t nk, int32_t dh, int32_t bk, float* kt) {
  const int32_t nk8 = round_up(nk, kNr);
  for (int32_t j = 0; j < nk; ++j) {
    const float* src = k + j * row_stride;
    for (int32_t d = 0; d < dh; ++d) kt[d * bk + j] = src[d];
  }
  for (int32_t d = 0; d < dh; ++d) {
    for (int32_t j = nk; j < nk8; ++j) kt[d * bk + j] = 0.0f;
  }
}

// V rows [0, nk) of the tile -> v (nk, dh8), columns [dh, dh8) zero. Returns false when any packed
// value is inf or NaN (then keys hidden from some row must be skipped, not multiplied by p = 0).
bool pack_v(const float* v, int64_t row_stride, int32_t nk, int32_t dh, int32_t dh8, float* vp) {
  VecF finite_probe(0.0f);  // x * 0 is 0 for finite x and NaN otherwise
  const int32_t dh4 = dh - dh % kLanes;
  for (int32_t j = 0; j < nk; ++j) {
    const float* src = v + j * row_stride;
    float* dst = vp + j * dh8;
    int32_t d = 0;
    for (; d < dh4; d += kLanes) {
      const VecF x = VecF::load_unaligned(src + d);
      finite_probe += x * VecF(0.0f);
      x.store_aligned(dst + d);
    }
    for (; d < dh; ++d) {
      dst[d] = src[d];
      finite_probe += VecF(src[d] * 0.0f);
    }
    for (; d < dh8; ++d) dst[d] = 0.0f;
  }
  return !xsimd::any(finite_probe != finite_probe);
}

// ---------------------------------------------------------------------------------------------------
// Micro-kernels

// s[0..4)[0..nk8) = q[0..4) . kt[:, 0..nk8): 4 query rows x 8 keys per pass, 8 accumulators + 2 key
// vectors + 1 broadcast = 11 of the 16 xmm registers V8 can use (it keeps one as scratch).
void qk_tile(const float* q, int32_t dh, const float* kt, int32_t bk, int32_t nk8, float* s) {
  const float* q0 = q;
  const float* q1 = q + dh;
  const float* q2 = q + 2 * dh;
  const float* q3 = q + 3 * dh;
  for (int32_t jb = 0; jb < nk8; jb += kNr) {
    VecF a00(0.0f), a01(0.0f), a10(0.0f), a11(0.0f), a20(0.0f), a21(0.0f), a30(0.0f), a31(0.0f);
    const float* kcol = kt + jb;
    for (int32_t d = 0; d < dh; ++d) {
      const VecF k0 = VecF::load_aligned(kcol + d * bk);
      const VecF k1 = VecF::load_aligned(kcol + d * bk + kLanes);
      VecF b(q0[d]);
      a00 += b * k0;
      a01 += b * k1;
      b = VecF(q1[d]);
      a10 += b * k0;
      a11 += b * k1;
      b = VecF(q2[d]);
      a20 += b * k0;
      a21 += b * k1;
      b = VecF(q3[d]);
      a30 += b * k0;
      a31 += b * k1;
    }
    a00.store_aligned(s + jb);
    a01.store_aligned(s + jb + kLanes);
    a10.store_aligned(s + bk + jb);
    a11.store_aligned(s + bk + jb + kLanes);
    a20.store_aligned(s + 2 * bk + jb);
    a21.store_aligned(s + 2 * bk + jb + kLanes);
    a30.store_aligned(s + 3 * bk + jb);
    a31.store_aligned(s + 3 * bk + jb + kLanes);
  }
}

// o[0..4)[0..dh8) = o * alpha + p[0..4)[0..nk) @ v[0..nk): 4 rows x 8 output lanes per pass over the
// key tile; the rescale by alpha is folded into loading the accumulators.
void pv_tile(const float* p, int32_t bk, const float* v, int32_t dh8, int32_t nk, const float* alpha, float* o) {
  const VecF al0(alpha[0]), al1(alpha[1]), al2(alpha[2]), al3(alpha[3]);
  float* o0 = o;
  float* o1 = o + dh8;
  float* o2 = o + 2 * dh8;
  float* o3 = o + 3 * dh8;
  const float* p0 = p;
  const float* p1 = p + bk;
  const float* p2 = p + 2 * bk;
  const float* p3 = p + 3 * bk;
  for (int32_t d = 0; d < dh8; d += kNr) {
    VecF a00 = VecF::load_aligned(o0 + d) * al0, a01 = VecF::load_aligned(o0 + d + kLanes) * al0;
    VecF a10 = VecF::load_aligned(o1 + d) * al1, a11 = VecF::load_aligned(o1 + d + kLanes) * al1;
    VecF a20 = VecF::load_aligned(o2 + d) * al2, a21 = VecF::load_aligned(o2 + d + kLanes) * al2;
    VecF a30 = VecF::load_aligned(o3 + d) * al3, a31 = VecF::load_aligned(o3 + d + kLanes) * al3;
    const float* vcol = v + d;
    for (int32_t j = 0; j < nk; ++j) {
      const VecF v0 = VecF::load_aligned(vcol + j * dh8);
      const VecF v1 = VecF::load_aligned(vcol + j * dh8 + kLanes);
      VecF b(p0[j]);
      a00 += b * v0;
      a01 += b * v1;
      b = VecF(p1[j]);
      a10 += b * v0;
      a11 += b * v1;
      b = VecF(p2[j]);
      a20 += b * v0;
      a21 += b * v1;
      b = VecF(p3[j]);
      a30 += b * v0;
      a31 += b * v1;
    }
    a00.store_aligned(o0 + d);
    a01.store_aligned(o0 + d + kLanes);
    a10.store_aligned(o1 + d);
    a11.store_aligned(o1 + d + kLanes);
    a20.store_aligned(o2 + d);
    a21.store_aligned(o2 + d + kLanes);
    a30.store_aligned(o3 + d);
    a31.store_aligned(o3 + d + kLanes);
  }
}

// The same arithmetic as pv_tile for one row (mul then add per key, keys in order), but keys hidden
// from this row are skipped instead of multiplied by p = 0, so inf/NaN values of V behind a mask are
// never read. Used only for tiles whose V holds non-finite values.
template <typename Visible>
void pv_row_skipping_hidden(const float* p, const float* v, int32_t dh8, int32_t nk, float alpha, float* o,
                            Visible&& visible) {
  const VecF al(alpha);
  for (int32_t d = 0; d < dh8; d += kLanes) {
    VecF acc = VecF::load_aligned(o + d) * al;
    for (int32_t j = 0; j < nk; ++j) {
      if (!visible(j)) continue;
      acc += VecF(p[j]) * VecF::load_aligned(v + j * dh8 + d);
    }
    acc.store_aligned(o + d);
  }
}

// ---------------------------------------------------------------------------------------------------
// Softmax step of one row of the score tile.

// s (nk8 floats, 16-byte aligned): raw q.k on entry, p = exp(scale*s - m_new) on exit (0 where hidden).
// Updates m and l; returns alpha = exp(m_old - m_new), the factor for this row's accumulators.
// hide(j) -> true when key j of the tile is hidden from this row; only called when any_hidden.
template <typename Hide>
float softmax_row(float* s, int32_t nk, int32_t nk8, float scale, bool any_hidden, Hide&& hide, float& m,
                  float& l) {
  // Score fix-ups: this is where an additive bias (ALiBi, relative position) would be added.
  const VecF vscale(scale);
  VecF vmax(kNegInf);
  for (int32_t j = 0; j < nk8; j += kLanes) {
    const VecF x = VecF::load_aligned(s + j) * vscale;
    x.store_aligned(s + j);
  }
  for (int32_t j = nk; j < nk8; ++j) s[j] = kNegInf;  // padding keys of the last tile
  if (any_hidden) {
    for (int32_t j = 0; j < nk; ++j) {
      if (hide(j)) s[j] = kNegInf;
    }
  }
  for (int32_t j = 0; j < nk8; j += kLanes) vmax = xsimd::max(vmax, VecF::load_aligned(s + j));
  // A NaN score may or may not survive the max (SSE and wasm max differ); either way exp(NaN - m) or
  // exp(s - NaN) below is NaN and poisons l, so the row ends NaN as in the reference.
  alignas(16) float lanes[kLanes];
  vmax.store_aligned(lanes);
  const float tile_max = std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
  const float m_old = m;
  const float m_new = tile_max > m_old ? tile_max : m_old;
  // Nothing visible yet: subtract 0 so that exp(-inf - m) stays 0 instead of exp(NaN).
  const float m_sub = (m_new == kNegInf) ? 0.0f : m_new;
  const VecF vm(m_sub);
  VecF vsum(0.0f);
  for (int32_t j = 0; j < nk8; j += kLanes) {
    const VecF p = simd::exp(VecF::load_aligned(s + j) - vm);
    p.store_aligned(s + j);
    vsum += p;
  }
  const float alpha = simd::exp(VecF(m_old - m_sub)).get(0);
  l = l * alpha + xsimd::hadd(vsum);
  m = m_new;
  return alpha;
}

}  // namespace

int32_t attention_rows_per_unit(const AttentionShape& shape) {
  return std::min(kMaxRowsPerUnit, round_up(std::max(shape.seq_len, 1), kMr));
}

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

size_t attention_scratch_floats(const AttentionShape& shape) { return make_layout(shape).total; }

void attention_run_unit(const AttentionArgs& args, const WorkUnit& unit, float* scratch) {
  const AttentionShape& shape = args.shape;
  const Layout lay = make_layout(shape);
  const int32_t dh = lay.dh, dh8 = lay.dh8, bk = lay.bk;
  const int32_t T = shape.kv_seq_len;
  const int32_t q_begin = unit.q_begin;
  const int32_t rows = unit.q_end - unit.q_begin;
  const int32_t rows4 = round_up(rows, kMr);

  // The one place that maps a query head to its key/value head (GQA would divide here).
  const int32_t kv_head = unit.head;
  const float* q = args.q.data + unit.batch * args.q.batch_stride + int64_t{unit.head} * dh;
  const float* k = args.k.data + unit.batch * args.k.batch_stride + int64_t{kv_head} * dh;
  const float* v = args.v.data + unit.batch * args.v.batch_stride + int64_t{kv_head} * dh;
  float* out = args.out.data + unit.batch * args.out.batch_stride + int64_t{unit.head} * dh;
  const uint8_t* mask = args.mask != nullptr ? args.mask + int64_t{unit.batch} * shape.seq_len * T : nullptr;

  float* qp = scratch + lay.q;
  float* kt = scratch + lay.kt;
  float* vp = scratch + lay.v;
  float* sp = scratch + lay.s;
  float* op = scratch + lay.o;
  float* mrow = scratch + lay.m;
  float* lrow = scratch + lay.l;
  float* alpha = scratch + lay.alpha;

  // Q block, rows padded with zeros up to a multiple of kMr (their results are discarded).
  for (int32_t r = 0; r < rows; ++r) std::memcpy(qp + r * dh, q + (q_begin + r) * args.q.row_stride, sizeof(float) * dh);
  std::fill(qp + rows * dh, qp + rows4 * dh, 0.0f);
  std::fill(op, op + rows4 * dh8, 0.0f);
  std::fill(mrow, mrow + rows4, kNegInf);
  std::fill(lrow, lrow + rows4, 0.0f);

  // Causal: keys >= q_end are hidden from every row of the block, so their tiles are never visited.
  const int32_t kv_end = args.causal ? std::min(T, unit.q_end) : T;
  for (int32_t j0 = 0; j0 < kv_end; j0 += bk) {
    const int32_t nk = std::min(bk, T - j0);
    const int32_t nk8 = round_up(nk, kNr);
    const bool causal_partial = args.causal && (j0 + nk - 1 > q_begin);

    // Mask bytes of this tile for the block's rows: all hidden -> skip, all visible -> no per-key test.
    bool mask_partial = false;
    if (mask != nullptr) {
      bool any = false, all = true;
      for (int32_t r = 0; r < rows; ++r) {
        const uint8_t* mr = mask + int64_t{q_begin + r} * T + j0;
        for (int32_t j = 0; j < nk; ++j) {
          const bool on = mr[j] != 0;
          any |= on;
          all &= on;
        }
      }
      if (!any) continue;
      mask_partial = !all;
    }

    pack_k_transposed(k + j0 * args.k.row_stride, args.k.row_stride, nk, dh, bk, kt);
    const bool v_finite = pack_v(v + j0 * args.v.row_stride, args.v.row_stride, nk, dh, dh8, vp);

    for (int32_t r = 0; r < rows4; r += kMr) qk_tile(qp + r * dh, dh, kt, bk, nk8, sp + r * bk);

    for (int32_t r = 0; r < rows4; ++r) {
      const int32_t i = q_begin + r;
      const bool real_row = r < rows;
      const uint8_t* mr = (mask != nullptr && real_row) ? mask + int64_t{i} * T + j0 : nullptr;
      const bool hides = real_row && (causal_partial || mask_partial);
      // mr already points at key j0 of row i.
      auto hide_rel = [&](int32_t j) {
        if (args.causal && j0 + j > i) return true;
        return mr != nullptr && mr[j] == 0;
      };
      alpha[r] = softmax_row(sp + r * bk, nk, nk8, args.scale, hides, hide_rel, mrow[r], lrow[r]);
    }

    if (v_finite || !(causal_partial || mask_partial)) {
      for (int32_t r = 0; r < rows4; r += kMr) pv_tile(sp + r * bk, bk, vp, dh8, nk, alpha + r, op + r * dh8);
    } else {
      for (int32_t r = 0; r < rows4; ++r) {
        const int32_t i = q_begin + r;
        const bool real_row = r < rows;
        const uint8_t* mr = (mask != nullptr && real_row) ? mask + int64_t{i} * T + j0 : nullptr;
        auto visible = [&](int32_t j) {
          if (!real_row) return true;
          if (args.causal && j0 + j > i) return false;
          return mr == nullptr || mr[j] != 0;
        };
        pv_row_skipping_hidden(sp + r * bk, vp, dh8, nk, alpha[r], op + r * dh8, visible);
      }
    }
  }

  // out = O / l; a row that never saw a visible key has l = 0 and O = 0, so it becomes NaN (0/0).
  for (int32_t r = 0; r < rows; ++r) {
    float* dst = out + (q_begin + r) * args.out.row_stride;
    const float* src = op + r * dh8;
    const float l = lrow[r];
    for (int32_t d = 0; d < dh; ++d) dst[d] = src[d] / l;
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
