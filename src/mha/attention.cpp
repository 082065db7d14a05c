// The fast attention kernel: FlashAttention-style tiling with an online softmax, xsimd micro-kernels.
//
// One unit = (batch b, head h, query rows [q_begin, q_end)). For each key tile of Bk keys:
//   1. pack K^T (Dh, Bk) and V (Bk, Dh8) of head h into aligned scratch (Dh8 = Dh rounded up to 8,
//      zero padded), so the micro-kernels only ever see whole vectors;
//   2. S (Bq, Bk) = Q K^T with a 4 rows x 8 keys register-blocked micro-kernel;
//   3. per query row: scale, hide masked/causal keys (-inf), running max m, p = exp(s - m), running sum l;
//   4. O (Bq, Dh8) = O * exp(m_old - m_new) + P V with a 4 rows x 8 lanes micro-kernel.
// At the end out = O / l. Nothing of size S x T exists; scratch depends on Dh and the fixed tile only.
// Rows whose float32 result is not finite (fully hidden rows, non-finite inputs, overflow of the logits or
// of O) are recomputed by the reference, so NaN/inf semantics are exactly the reference's.
//
// Determinism: every query row goes through exactly the same float operations whatever block it is in
// (the key tiles start at 0 for every block, the 4-row micro-kernels treat rows independently, skipped
// tiles would only have added exact zeros), so results do not depend on the unit split or order.
#include "mha/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <xmmintrin.h>  // _MM_TRANSPOSE4_PS (Emscripten maps SSE onto SIMD128)

#include <xsimd/xsimd.hpp>

#include "mha/reference.hpp"
#include "mha/simd_exp.hpp"

#ifdef MHA_PROFILE_NOINLINE  // profiling builds only: keeps each phase a separate function for perf
#define MHA_PHASE __attribute__((noinline))
#else
#define MHA_PHASE
#endif

namespace mha {
namespace {

using simd::VecF;
constexpr int kLanes = 4;  // f32x4: SSE4.2 natively, SIMD128 in wasm
static_assert(VecF::size == kLanes, "the micro-kernels are written for 4-lane vectors");

constexpr int32_t kBlockRows = 64;       // Bq: query rows per score tile
constexpr int32_t kMaxRowsPerUnit = 1024; // a unit runs up to 16 blocks against each packed key tile
constexpr int64_t kMinUnits = 8;         // keep enough units for the thread pool on small problems
constexpr int32_t kMaxKeysPerTile = 128; // Bk (measured: 128 halves per-tile overheads, +1-4% over 64)
constexpr int32_t kCausalKeysPerTile = 64;
constexpr int32_t kBk = kMaxKeysPerTile; // row stride of the K^T and S tiles (a constant: see micro-kernels)
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
  int32_t bs = 0;   // rows per score tile (block)
  int32_t bk = 0;   // keys per tile
  size_t q = 0, kt = 0, v = 0, s = 0, o = 0, m = 0, l = 0, alpha = 0, total = 0;
};

Layout make_layout(const AttentionShape& shape) {
  Layout lay;
  lay.dh = shape.head_dim();
  lay.dh8 = round_up(lay.dh, kNr);
  lay.bq = attention_rows_per_unit(shape);
  lay.bk = keys_per_tile(shape);
  lay.bs = std::min(kBlockRows, round_up(lay.bq, kMr));
  const size_t bq4 = static_cast<size_t>(round_up(lay.bq, kMr));
  const size_t bs4 = static_cast<size_t>(lay.bs);
  size_t at = 0;
  auto take = [&at](size_t floats) {
    const size_t here = at;
    at += round_up16(floats);
    return here;
  };
  lay.q = take(bq4 * lay.dh);                         // Q block as Bq/4 panels (Dh, 4), unscaled
  lay.kt = take(size_t(lay.dh) * kBk);                // K tile transposed (Dh, kBk)
  lay.v = take(size_t(lay.bk) * lay.dh8);             // V tile (Bk, Dh8)
  lay.s = take(bs4 * kBk);                            // scores / probabilities of one block (64, kBk)
  lay.o = take(bq4 * lay.dh8);                        // output accumulators (Bq, Dh8)
  lay.m = take(bq4);                                  // running max per row
  lay.l = take(bq4);                                  // running sum per row
  lay.alpha = take(bq4);                              // this tile's rescale factor per row
  lay.total = at;
  return lay;
}

// ---------------------------------------------------------------------------------------------------
// Packing

// Rows r..r+3 (row_stride apart, Dh each) -> dst (Dh, 4 adjacent floats, dst_stride apart): dst[d *
// dst_stride + i] = row i [d]. 4x4 blocks are transposed in registers (4 unaligned row loads, 8 shuffles,
// 4 aligned stores, so dst must be 16-byte aligned and dst_stride a multiple of 4); a Dh % 4 tail goes
// scalar. Used for the Q panels (dst_stride kMr) and the K^T tile (dst_stride kBk).
template <int32_t kDstStride>
inline void transpose_4_rows(const float* r0, int64_t row_stride, int32_t dh, float* dst) {
  const float* r1 = r0 + row_stride;
  const float* r2 = r1 + row_stride;
  const float* r3 = r2 + row_stride;
  const int32_t dh4 = dh - dh % kLanes;
  for (int32_t d = 0; d < dh4; d += kLanes) {
    __m128 x0 = _mm_loadu_ps(r0 + d), x1 = _mm_loadu_ps(r1 + d), x2 = _mm_loadu_ps(r2 + d), x3 = _mm_loadu_ps(r3 + d);
    _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
    _mm_store_ps(dst + (d + 0) * kDstStride, x0);
    _mm_store_ps(dst + (d + 1) * kDstStride, x1);
    _mm_store_ps(dst + (d + 2) * kDstStride, x2);
    _mm_store_ps(dst + (d + 3) * kDstStride, x3);
  }
  for (int32_t d = dh4; d < dh; ++d) {
    dst[d * kDstStride + 0] = r0[d];
    dst[d * kDstStride + 1] = r1[d];
    dst[d * kDstStride + 2] = r2[d];
    dst[d * kDstStride + 3] = r3[d];
  }
}

// K rows [0, nk) of the tile -> kt (Dh, kBk); keys [nk, round_up(nk, kNr)) are zero.
MHA_PHASE void pack_k_transposed(const float* k, int64_t row_stride, int32_t nk, int32_t dh, float* kt) {
  const int32_t nk8 = round_up(nk, kNr);
  const int32_t nk4 = nk - nk % kLanes;
  for (int32_t j = 0; j < nk4; j += kLanes) transpose_4_rows<kBk>(k + j * row_stride, row_stride, dh, kt + j);
  for (int32_t j = nk4; j < nk; ++j) {
    const float* src = k + j * row_stride;
    for (int32_t d = 0; d < dh; ++d) kt[d * kBk + j] = src[d];
  }
  for (int32_t d = 0; d < dh; ++d) {
    for (int32_t j = nk; j < nk8; ++j) kt[d * kBk + j] = 0.0f;
  }
}

// V rows [0, nk) of the tile -> v (nk, dh8), columns [dh, dh8) zero.
MHA_PHASE void pack_v(const float* v, int64_t row_stride, int32_t nk, int32_t dh, int32_t dh8, float* vp) {
  const int32_t dh4 = dh - dh % kLanes;
  for (int32_t j = 0; j < nk; ++j) {
    const float* src = v + j * row_stride;
    float* dst = vp + j * dh8;
    int32_t d = 0;
    for (; d < dh4; d += kLanes) VecF::load_unaligned(src + d).store_aligned(dst + d);
    for (; d < dh; ++d) dst[d] = src[d];
    for (; d < dh8; ++d) dst[d] = 0.0f;
  }
}

// ---------------------------------------------------------------------------------------------------
// Micro-kernels
//
// Addressing matters as much as arithmetic here: V8 addresses wasm memory as [base + index + imm], so
// every distinct computed address costs an extra lea. The scratch strides are compile-time constants
// (kBk) and the Q block is packed as 4-row panels (d-major, the 4 rows' values adjacent), so each
// micro-kernel step reads all its operands from one or two pointers with immediate offsets.

// s[i][jb..jb+8) = scale * (q_i . k_j) for the 4 rows of one Q panel (Dh, 4) and keys [0, nk8) of the
// K^T tile (Dh, kBk). Returns true when some stored score is +-inf or NaN (q.k overflowed float32, or an
// input is not finite): checked here, on registers, at 9 operations per 32 scores instead of a pass over
// each row (a sum of finite scores that overflows only costs a needless, exact, recomputation).
// With row_max, also row_max[0..4) = each row's largest score (the caller asks only when no key of the
// tile is hidden or padding): 8 maxima per 32 scores here, where a pass over the stored rows was 3% of
// long2k's time (measured with it: long2k, bert-b8 and cross 2-5% faster).
// 8 accumulators + 2 key vectors + 4 broadcasts + 1 product temporary = 15 of the 16 xmm registers (V8
// keeps the 16th as scratch): the largest block that does not spill without FMA.
MHA_PHASE bool qk_tile(const float* qpanel, int32_t dh, const float* kt, int32_t nk8, float scale, float* s,
                       float* row_max) {
  const VecF vscale(scale);
  VecF nonfinite(0.0f);  // stays 0 unless a score is not finite (0 * inf = NaN)
  VecF max0(kNegInf), max1(kNegInf), max2(kNegInf), max3(kNegInf);  // lane-wise maxima of the 4 rows
  for (int32_t jb = 0; jb < nk8; jb += kNr) {
    VecF a00(0.0f), a01(0.0f), a10(0.0f), a11(0.0f), a20(0.0f), a21(0.0f), a30(0.0f), a31(0.0f);
    const float* qp = qpanel;
    const float* kp = kt + jb;
    auto step = [&](const float* qd, const float* kd) {
      const VecF k0 = VecF::load_aligned(kd);
      const VecF k1 = VecF::load_aligned(kd + kLanes);
      const VecF b0(qd[0]), b1(qd[1]), b2(qd[2]), b3(qd[3]);
      a00 += b0 * k0;
      a01 += b0 * k1;
      a10 += b1 * k0;
      a11 += b1 * k1;
      a20 += b2 * k0;
      a21 += b2 * k1;
      a30 += b3 * k0;
      a31 += b3 * k1;
    };
    // Not unrolled: LLVM would hoist the second step's loads above the first step's arithmetic, and
    // the extra live vectors spill in V8 (measured: slower).
    for (int32_t d = 0; d < dh; ++d, qp += kMr, kp += kBk) step(qp, kp);
    a00 *= vscale, a01 *= vscale, a10 *= vscale, a11 *= vscale;
    a20 *= vscale, a21 *= vscale, a30 *= vscale, a31 *= vscale;
    a00.store_aligned(s + jb);
    a01.store_aligned(s + jb + kLanes);
    a10.store_aligned(s + kBk + jb);
    a11.store_aligned(s + kBk + jb + kLanes);
    a20.store_aligned(s + 2 * kBk + jb);
    a21.store_aligned(s + 2 * kBk + jb + kLanes);
    a30.store_aligned(s + 3 * kBk + jb);
    a31.store_aligned(s + 3 * kBk + jb + kLanes);
    nonfinite += (((a00 + a01) + (a10 + a11)) + ((a20 + a21) + (a30 + a31))) * VecF(0.0f);
    if (row_max != nullptr) {
      max0 = simd::pseudo_max(max0, simd::pseudo_max(a00, a01));
      max1 = simd::pseudo_max(max1, simd::pseudo_max(a10, a11));
      max2 = simd::pseudo_max(max2, simd::pseudo_max(a20, a21));
      max3 = simd::pseudo_max(max3, simd::pseudo_max(a30, a31));
    }
  }
  if (row_max != nullptr) {
    // row_max[i] = max of the lanes of max_i: two rounds of shuffles and maxima over the 4 rows at once.
    const VecF lo01(_mm_unpacklo_ps(max0.data, max1.data)), hi01(_mm_unpackhi_ps(max0.data, max1.data));
    const VecF lo23(_mm_unpacklo_ps(max2.data, max3.data)), hi23(_mm_unpackhi_ps(max2.data, max3.data));
    const VecF m01 = simd::pseudo_max(lo01, hi01);  // rows 0 1 0 1
    const VecF m23 = simd::pseudo_max(lo23, hi23);  // rows 2 3 2 3
    simd::pseudo_max(VecF(_mm_movelh_ps(m01.data, m23.data)), VecF(_mm_movehl_ps(m23.data, m01.data))).store_aligned(row_max);
  }
  return xsimd::hadd(nonfinite) != 0.0f;
}

// o[0..4)[0..dh8) = o * alpha + p[0..4)[0..nk) @ v[0..nk): 4 rows x 8 output lanes per pass over the
// key tile; p rows are kBk apart, packed v and o rows dh8 apart. The rescale by alpha is folded into loading the
// accumulators.
MHA_PHASE void pv_tile(const float* p, const float* v, int32_t dh8, int32_t nk, const float* alpha,
                       float* o) {
  const VecF al0(alpha[0]), al1(alpha[1]), al2(alpha[2]), al3(alpha[3]);
  float* o0 = o;
  float* o1 = o + dh8;
  float* o2 = o + 2 * dh8;
  float* o3 = o + 3 * dh8;
  for (int32_t d = 0; d < dh8; d += kNr) {
    VecF a00 = VecF::load_aligned(o0 + d) * al0, a01 = VecF::load_aligned(o0 + d + kLanes) * al0;
    VecF a10 = VecF::load_aligned(o1 + d) * al1, a11 = VecF::load_aligned(o1 + d + kLanes) * al1;
    VecF a20 = VecF::load_aligned(o2 + d) * al2, a21 = VecF::load_aligned(o2 + d + kLanes) * al2;
    VecF a30 = VecF::load_aligned(o3 + d) * al3, a31 = VecF::load_aligned(o3 + d + kLanes) * al3;
    const float* vp = v + d;
    const float* pp = p;
    auto step = [&](const float* pj, const float* vj) {
      const VecF v0 = VecF::load_unaligned(vj);
      const VecF v1 = VecF::load_unaligned(vj + kLanes);
      const VecF b0(pj[0]), b1(pj[kBk]), b2(pj[2 * kBk]), b3(pj[3 * kBk]);
      a00 += b0 * v0;
      a01 += b0 * v1;
      a10 += b1 * v0;
      a11 += b1 * v1;
      a20 += b2 * v0;
      a21 += b2 * v1;
      a30 += b3 * v0;
      a31 += b3 * v1;
    };
    for (int32_t j = 0; j < nk; ++j, ++pp, vp += dh8) step(pp, vp);
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

// ---------------------------------------------------------------------------------------------------
// Online softmax of one score tile, in three passes over the block's rows: the row maxima (from qk_tile
// when no key is hidden; otherwise a pass over each row, whose dependency chains overlap), the running max
// and rescale factors of 4 rows per vector, then the exponentials and row sums. Scores are in log2 units:
// s = scale*log2(e) * q.k.

// Hidden keys (hide(j), only asked when any_hidden) and the padding keys [nk, nk8) of a row become -inf;
// returns the row's largest score of the tile. A NaN score is dropped by the max or kept (when first);
// either way its row is poisoned by the nonfinite check of qk_tile.
template <typename Hide>
MHA_PHASE float hide_and_max_row(float* s, int32_t nk, int32_t nk8, bool any_hidden, Hide&& hide) {
  // Score fix-ups: this is where an additive bias (ALiBi, relative position) would be added.
  for (int32_t j = nk; j < nk8; ++j) s[j] = kNegInf;
  if (any_hidden) {
    for (int32_t j = 0; j < nk; ++j) {
      if (hide(j)) s[j] = kNegInf;
    }
  }
  VecF vmax0 = VecF::load_aligned(s), vmax1 = VecF::load_aligned(s + kLanes);
  for (int32_t j = kNr; j < nk8; j += kNr) {
    vmax0 = simd::pseudo_max(vmax0, VecF::load_aligned(s + j));
    vmax1 = simd::pseudo_max(vmax1, VecF::load_aligned(s + j + kLanes));
  }
  alignas(16) float lanes[kLanes];
  simd::pseudo_max(vmax0, vmax1).store_aligned(lanes);
  return std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
}

// 4 rows: m_new = max(m, tile_max); m_sub = m_new, or 0 while nothing is visible (so that -inf - m_sub
// stays -inf instead of NaN); alpha = 2^(m_old - m_sub), the rescale of the rows' sums and accumulators.
MHA_PHASE void update_running_max(const float* tile_max, float* m, float* m_sub, float* alpha,
                                  const simd::Exp2Constants& ek) {
  const VecF m_old = VecF::load_unaligned(m);
  const VecF m_new = simd::pseudo_max(m_old, VecF::load_unaligned(tile_max));
  const VecF sub = xsimd::select(m_new == VecF(kNegInf), VecF(0.0f), m_new);
  m_new.store_unaligned(m);
  sub.store_unaligned(m_sub);
  simd::exp2_nonpositive(m_old - sub, ek).store_unaligned(alpha);
}

// s (nk8 floats, 16-byte aligned) -> p = 2^(s - m_sub) (0 where hidden); returns the sum of p.
MHA_PHASE float exp_row(float* s, int32_t nk8, float m_sub, const simd::Exp2Constants& ek) {
  const VecF vm(m_sub);
  VecF vsum0(0.0f), vsum1(0.0f);
  for (int32_t j = 0; j < nk8; j += kNr) {
    const VecF p0 = simd::exp2_nonpositive(VecF::load_aligned(s + j) - vm, ek);
    const VecF p1 = simd::exp2_nonpositive(VecF::load_aligned(s + j + kLanes) - vm, ek);
    p0.store_aligned(s + j);
    p1.store_aligned(s + j + kLanes);
    vsum0 += p0;
    vsum1 += p1;
  }
  return xsimd::hadd(vsum0 + vsum1);
}

}  // namespace

int32_t attention_rows_per_unit(const AttentionShape& shape) {
  const int32_t s4 = round_up(std::max(shape.seq_len, 1), kMr);
  const int32_t dh8 = round_up(std::max(shape.num_heads > 0 ? shape.head_dim() : 1, 1), kNr);
  // The unit's Q panels and O accumulators stay within about 512 KiB: 1024 rows at Dh <= 64. Every unit
  // packs K/V of all its tiles, strided reads from memory that is mostly not in cache (K/V packing was
  // 18% of the time at 256 rows), so more rows per unit pay although Q and O then live in L2/L3:
  // measured on (1,2048,2048,768,12), 256 -> 512 rows with Bk 128 +11%, 512 -> 1024 rows +6%, 2048 no better.
  int32_t rows = std::max(kBlockRows, std::min(kMaxRowsPerUnit, 65536 / dh8 / kBlockRows * kBlockRows));
  // Above round_up(s4, 64) every choice is one block per head: start there (same result, and short
  // sequences skip up to 15 divisions on every call of this function, which runs per unit).
  rows = std::min(rows, round_up(s4, kBlockRows));
  const int64_t heads = int64_t{std::max(shape.batch, 1)} * std::max(shape.num_heads, 1);
  while (rows > kBlockRows && heads * ((s4 + rows - 1) / rows) < kMinUnits) rows -= kBlockRows;
  return std::min(rows, s4);
}

size_t attention_scratch_floats(const AttentionShape& shape) { return make_layout(shape).total; }

void attention_run_unit(const AttentionArgs& args, const WorkUnit& unit, float* scratch) {
  const AttentionShape& shape = args.shape;
  const Layout lay = make_layout(shape);
  const int32_t dh = lay.dh, dh8 = lay.dh8;
  // Causal: tiles of 64 keys, so that the diagonal tiles (partly hidden, computed in full) waste less.
  const int32_t bk = args.causal ? std::min(lay.bk, kCausalKeysPerTile) : lay.bk;
  const int32_t T = shape.kv_seq_len;
  const int32_t q_begin = unit.q_begin;
  const int32_t rows = unit.q_end - unit.q_begin;
  const int32_t rows4 = round_up(rows, kMr);

  const auto [q, k, v, out, mask] = unit_views(args, unit);

  float* qp = scratch + lay.q;
  float* kt = scratch + lay.kt;
  float* vp = scratch + lay.v;
  float* sp = scratch + lay.s;
  float* op = scratch + lay.o;
  float* mrow = scratch + lay.m;
  float* lrow = scratch + lay.l;
  float* alpha = scratch + lay.alpha;

  // Q rows as panels of 4 rows, qp[(r/4)*Dh*4 + d*4 + r%4]; rows past the unit are zero (discarded).
  const int32_t full4 = rows - rows % kMr;
  const int32_t dh4 = dh - dh % kLanes;
  for (int32_t r = 0; r < full4; r += kMr) {
    transpose_4_rows<kMr>(q + (q_begin + r) * args.q.row_stride, args.q.row_stride, dh, qp + r * dh);
  }
  for (int32_t r = full4; r < rows4; ++r) {
    float* panel = qp + (r / kMr) * dh * kMr + r % kMr;
    if (r < rows) {
      const float* src = q + (q_begin + r) * args.q.row_stride;
      for (int32_t d = 0; d < dh; ++d) panel[d * kMr] = src[d];
    } else {
      for (int32_t d = 0; d < dh; ++d) panel[d * kMr] = 0.0f;
    }
  }
  // The kernel folds log2(e) into the scale. Where that product is not a normal float it is no longer the
  // given scale to float precision: above FLT_MAX / log2(e) (~2.4e38) it overflows, and below FLT_MIN it
  // is subnormal and keeps only a few bits. Such (absurd) scales take the reference path, row by row.
  const float folded_scale = args.scale * 1.44269504088896341f;
  if (!std::isfinite(folded_scale) ||
      (folded_scale != 0.0f && std::fabs(folded_scale) < std::numeric_limits<float>::min())) {
    for (int32_t i = unit.q_begin; i < unit.q_end; ++i) reference_attention_query(args, unit.batch, unit.head, i);
    return;
  }
  const simd::Exp2Constants exp_constants;
  // Scores in log2 units: softmax(scale*s) = 2^(scale*log2(e)*s - max) / sum.
  const float scale2 = folded_scale;
  std::fill(op, op + rows4 * dh8, 0.0f);
  std::fill(mrow, mrow + rows4, kNegInf);
  std::fill(lrow, lrow + rows4, 0.0f);

  // V is packed once per tile; reading it in place (row stride D) measured slower (long2k 28.9 vs 29.4).

  // Causal: keys >= q_end are hidden from every row of the unit, so their tiles are never visited.
  const int32_t kv_end = args.causal ? std::min(T, unit.q_end) : T;
  bool panel_nonfinite[kBlockRows / kMr];
  alignas(16) float tile_max[kBlockRows];
  alignas(16) float m_sub[kBlockRows];
  for (int32_t j0 = 0; j0 < kv_end; j0 += bk) {
    const int32_t nk = std::min(bk, T - j0);
    const int32_t nk8 = round_up(nk, kNr);
    bool packed = false;

    // The unit's rows in blocks of lay.bs sharing this tile's packed K^T (and V). Every row goes through
    // the same float operations in any block: a tile a row skips would only have added exact zeros.
    for (int32_t b0 = 0; b0 < rows; b0 += lay.bs) {
      const int32_t brows = std::min(lay.bs, rows - b0);
      const int32_t brows4 = round_up(brows, kMr);
      const int32_t bq_begin = q_begin + b0;
      const int32_t bq_end = bq_begin + brows;
      if (args.causal && j0 >= bq_end) continue;  // every key of the tile is after every row of the block
      const bool causal_partial = args.causal && (j0 + nk - 1 > bq_begin);

      // Mask bytes of this tile for the block's rows: all hidden -> skip, all visible -> no per-key test.
      bool mask_partial = false;
      if (mask != nullptr) {
        bool any = false, all = true;
        for (int32_t r = 0; r < brows; ++r) {
          const uint8_t* mr = mask + int64_t{bq_begin + r} * T + j0;
          for (int32_t j = 0; j < nk; ++j) {
            const bool on = mr[j] != 0;
            any |= on;
            all &= on;
          }
        }
        if (!any) continue;
        mask_partial = !all;
      }
      const bool hides_some = causal_partial || mask_partial;

      if (!packed) {
        pack_k_transposed(k + j0 * args.k.row_stride, args.k.row_stride, nk, dh, kt);
        pack_v(v + j0 * args.v.row_stride, args.v.row_stride, nk, dh, dh8, vp);
        packed = true;
      }

      float* qb = qp + b0 * dh;
      float* ob = op + b0 * dh8;
      // Without hidden or padding keys the row maxima come from the QK^T epilogue, on registers.
      const bool fused_max = !hides_some && nk == nk8;
      for (int32_t r = 0; r < brows4; r += kMr) {
        panel_nonfinite[r / kMr] = qk_tile(qb + r * dh, dh, kt, nk8, scale2, sp + r * kBk, fused_max ? tile_max + r : nullptr);
      }

      for (int32_t r = 0; r < brows4 && !fused_max; ++r) {
        const int32_t i = bq_begin + r;
        const bool real_row = r < brows;
        const uint8_t* mr = (mask != nullptr && real_row) ? mask + int64_t{i} * T + j0 : nullptr;
        // mr already points at key j0 of row i.
        auto hide_rel = [&](int32_t j) {
          if (args.causal && j0 + j > i) return true;
          return mr != nullptr && mr[j] == 0;
        };
        tile_max[r] = hide_and_max_row(sp + r * kBk, nk, nk8, real_row && hides_some, hide_rel);
      }
      for (int32_t r = 0; r < brows4; r += kMr) {
        update_running_max(tile_max + r, mrow + b0 + r, m_sub + r, alpha + r, exp_constants);
      }
      for (int32_t r = 0; r < brows4; ++r) {
        const float sum = exp_row(sp + r * kBk, nk8, m_sub[r], exp_constants);
        // A non-finite raw score in the row's panel: poison l (see qk_tile), the reference redoes the row.
        const float l_old = panel_nonfinite[r / kMr] ? std::numeric_limits<float>::quiet_NaN() : lrow[b0 + r];
        lrow[b0 + r] = l_old * alpha[r] + sum;
      }

      // Keys hidden from a row enter with p = 0. A non-finite V value there turns 0 * inf into NaN, and the
      // row is then recomputed by the reference, which never reads hidden keys.
      for (int32_t r = 0; r < brows4; r += kMr) pv_tile(sp + r * kBk, vp, dh8, nk, alpha + r, ob + r * dh8);
    }
  }

  // out = O / l; a row that never saw a visible key has l = 0 and O = 0, so it becomes NaN (0/0). A row
  // is checked before it is stored: out may be q itself (attention.hpp), and a non-finite row is redone
  // by the reference, which reads that row of q.
  for (int32_t r = 0; r < rows; ++r) {
    const float* src = op + r * dh8;
    const float l = lrow[r];
    // A row that saw a visible key has l >= 1 (its max key adds 2^0 = 1), so finite O gives a finite
    // O / l; anything else takes the exact per-value test.
    VecF o_check(0.0f);  // stays 0 unless some value of O is inf or NaN (0 * inf = NaN)
    int32_t d = 0;
    for (; d < dh4; d += kLanes) o_check += VecF::load_aligned(src + d) * VecF(0.0f);
    float tail_check = xsimd::hadd(o_check);
    for (; d < dh; ++d) tail_check += src[d] * 0.0f;
    bool finite = tail_check == 0.0f && l >= 1.0f && l <= std::numeric_limits<float>::max();
    if (!finite) {
      finite = true;
      for (d = 0; d < dh; ++d) finite &= std::isfinite(src[d] / l);
    }
    // Non-finite rows (fully hidden rows, non-finite inputs, float32 overflow of the logits or of the
    // weighted sum) are rare; recomputing them with the reference gives exactly its NaN/inf semantics.
    if (!finite) {
      reference_attention_query(args, unit.batch, unit.head, q_begin + r);
      continue;
    }
    float* dst = out + (q_begin + r) * args.out.row_stride;
    const VecF vl(l);
    for (d = 0; d < dh4; d += kLanes) (VecF::load_aligned(src + d) / vl).store_unaligned(dst + d);  // exact, as scalar
    for (; d < dh; ++d) dst[d] = src[d] / l;
  }
}


}  // namespace mha
