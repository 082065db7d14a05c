// The kernel variant mha::simd128: FlashAttention-style tiling with an online softmax, xsimd micro-kernels
// (simd128_tiles.hpp) on 4-lane vectors: SSE4.2 natively, WebAssembly SIMD128 with Emscripten. Compiled
// again with MHA_VARIANT_RELAXED it is the variant mha::relaxed, whose multiply-adds are relaxed_madd
// (simd::madd; CMakeLists.txt builds it with clang-19 and -mrelaxed-simd).
//
// One unit = (batch b, KV head g, query rows [q_begin, q_end)) of the G query heads that read g:
//   1. pack the unit's Q rows of each head as panels of kMr rows (Dh, kMr) into aligned scratch (kMr = 4:
//      simd128_tiles.hpp says why);
// then for each key tile of Bk keys that some row of the unit may see (the unit's key range), and each
// block of Bq rows:
//   2. classify the tile against the block's visible key ranges and the mask: skipped when every key is
//      hidden from every row, computed without per-key tests when none is;
//   3. pack K^T (Dh, Bk) and V (Bk, Dv8) of KV head g (once per tile, for every block and head; Dv8 = Dv
//      rounded up to 8, zero padded), so the micro-kernels only ever see whole vectors;
//   4. per head of the group: S (Bq, Bk) = Q K^T with a kMr rows x 8 keys register-blocked micro-kernel,
//      whose epilogue applies softcap, ALiBi and bias on registers (simd128_tiles.hpp);
//   5. online softmax of the tile: hide keys (-inf), running max m, p = 2^(s - m), running sum l;
//   6. O (Bq, Dv8) = O * 2^(m_old - m_new) + P V with a kMr rows x 8 lanes micro-kernel;
//   7. finish the rows: out = O / l, lse = (m + log2 l) ln 2. Rows whose float32 result is not finite
//      (empty rows, non-finite inputs or bias, overflow of the logits or of O) are recomputed by the
//      reference, so NaN/inf and empty-row semantics are exactly the reference's.
// Tiles outside the unit's key range (causal, window, kvLengths: visibility.hpp) are never read, so a
// windowed call costs O(S * W). K/V tiles are packed once per unit and serve its G query heads.
// Nothing of size S x T exists; scratch depends on Dh, Dv and the fixed tiles only.
// Sinks: a row of head h starts with m = sink[h]*log2(e), l = 1 (the sink's own term), O = 0, so the sink
// joins the running max and sum without a pass of its own; a row without a visible key ends with out 0,
// lse = sink. Rope: the packed Q panels and K^T tile are rotated in place (rope.hpp), by position.
//
// Determinism: every query row goes through exactly the same float operations whatever block it is in
// (the key tiles lie on one grid of multiples of Bk for every block, the micro-kernels treat rows
// independently, and a tile a block skips would only have rescaled the row by exactly 1 and added exact
// zeros), so results do not depend on the unit split or order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "mha/kernels/kernel.hpp"
#include "mha/reference/reference.hpp"
#include "mha/core/rope.hpp"
#include "mha/kernels/simd128_tiles.hpp"
#include "mha/core/workspace.hpp"

namespace mha {
namespace MHA_SIMD_VARIANT {
namespace {

// Bq: a multiple of kRowPad (each block's rows are whole panels and whole vectors of 4 rows); 64 rows
// balance the per-block overheads against the scores and O a block keeps in L1.
constexpr int32_t kRowsPerBlock = 64;
static_assert(kRowsPerBlock % kRowPad == 0, "a block holds whole panels");
constexpr int32_t kMaxRowsPerUnit = 1024;      // a unit runs up to 16 blocks against each packed key tile
constexpr int64_t kMinUnits = 8;               // keep enough units for the thread pool on small problems
constexpr int32_t kKeysPerTile = kTileStride;  // Bk: 128 keys halve the per-tile overheads of 64
// Bk when the visible keys depend on the row (causal, window): the diagonal and window-edge tiles, partly
// hidden and computed in full, waste less.
constexpr int32_t kRangedKeysPerTile = 64;
constexpr float kLn2 = 0.693147180559945309f;

// Query rows of each head per unit, for units of `heads_per_kv_head` heads.
int32_t rows_per_unit(const AttentionShape& shape, int32_t padded_head_dim, int32_t heads_per_kv_head) {
  const int32_t s4 = round_up(shape.seq_len, kRowPad);
  // The unit's Q panels and O accumulators stay within about 512 KiB: 1024 rows (over the unit's heads)
  // at Dh <= 64. Every unit packs K/V of all its tiles, strided reads from memory that is mostly not in
  // cache, so more rows per unit pay although Q and O then live in L2/L3, up to 1024 rows. A
  // grouped-query unit shares the rows among its heads (each K/V tile it packs serves all of them), at
  // least one block each.
  int32_t rows =
      std::max(kRowsPerBlock, std::min(kMaxRowsPerUnit, 65536 / padded_head_dim / kRowsPerBlock * kRowsPerBlock));
  rows = std::max(kRowsPerBlock, rows / heads_per_kv_head / kRowsPerBlock * kRowsPerBlock);
  rows = std::min(rows, round_up(s4, kRowsPerBlock));  // above that every choice is one unit per head
  const int64_t kv_heads = int64_t{shape.batch} * shape.kv_heads();
  while (rows > kRowsPerBlock && kv_heads * ((s4 + rows - 1) / rows) < kMinUnits) rows -= kRowsPerBlock;
  return std::min(rows, s4);
}

KernelPlan plan(const AttentionArgs& args) {
  const AttentionShape& shape = args.shape;
  KernelPlan p;
  p.head_dim = shape.head_dim();
  p.padded_head_dim = round_up(p.head_dim, kNr);
  p.value_dim = shape.value_dim();
  p.padded_value_dim = round_up(p.value_dim, kNr);
  p.heads_per_kv_head = shape.num_heads / shape.kv_heads();
  p.rows_per_unit = rows_per_unit(shape, std::max(p.padded_head_dim, p.padded_value_dim), p.heads_per_kv_head);
  p.rows_per_block = std::min(kRowsPerBlock, round_up(p.rows_per_unit, kRowPad));
  const int32_t tile = args.ranged() ? kRangedKeysPerTile : kKeysPerTile;
  p.keys_per_tile = std::min(tile, round_up(shape.kv_seq_len, kNr));
  count_units(shape, p);

  const size_t dh = static_cast<size_t>(p.head_dim), dv8 = static_cast<size_t>(p.padded_value_dim);
  const size_t unit_rows = size_t(p.heads_per_kv_head) * round_up(p.rows_per_unit, kRowPad);  // G * padded rows
  ScratchLayout& lay = p.scratch;
  ScratchCursor cursor;
  lay.q_panels = cursor.take(unit_rows * dh);               // (G * padded rows / kMr) panels (Dh, kMr), unscaled
  lay.k_tile = cursor.take(dh * kTileStride);               // K^T (Dh, kTileStride)
  lay.v_tile = cursor.take(size_t(p.keys_per_tile) * dv8);  // V (Bk, Dv8)
  lay.scores = cursor.take(size_t(p.rows_per_block) * kTileStride);  // one block's scores (Bq, kTileStride)
  lay.out_acc = cursor.take(unit_rows * dv8);                        // O (G * padded rows, Dv8)
  lay.row_max = cursor.take(unit_rows);
  lay.row_sum = cursor.take(unit_rows);
  lay.rescale = cursor.take(unit_rows);
  lay.reference = cursor.take(2 * reference_scratch_doubles(p.head_dim, p.value_dim, args.rope.enabled()));
  lay.total = cursor.at;
  return p;
}

// A unit's scratch buffers (ScratchLayout) and its constants.
struct UnitState {
  const AttentionArgs& args;
  const KernelPlan& plan;
  const WorkUnit& unit;
  UnitViews views;
  int32_t rows;         // query rows of each head of the unit
  int32_t padded_rows;  // rows rounded up to kRowPad: the stride between heads in q_panels, o, m, l
  float* q_panels;
  float* k_tile;
  float* v_tile;
  float* scores;
  float* out_acc;
  float* row_max;
  float* row_sum;
  float* rescale;
  double* reference_acc;
  bool epilogue = false;          // softcap, ALiBi or bias: qk_tile<true>
  ScoreEpilogue scores_epilogue;  // the call's folded constants (per head, tile and panel fields: attend_block)
};

// The call's score constants in log2 units (ScoreEpilogue), false where one is not a normal float (or 0):
// the kernel folds log2(e) (and 1/softcap) into them, and such a product is no longer the given value to
// float precision (above FLT_MAX / log2(e) ~ 2.4e38 it overflows, below FLT_MIN it keeps only a few
// bits). Such (absurd) values take the reference path, row by row.
bool fold_constants(const AttentionArgs& args, ScoreEpilogue& ep) {
  auto normal = [](float f) {
    return std::isfinite(f) && (f == 0.0f || std::fabs(f) >= std::numeric_limits<float>::min());
  };
  ep.softcap = args.softcap > 0.0f;
  ep.scale = ep.softcap ? args.scale / args.softcap : args.scale * kLog2eFloat;
  ep.softcap_scale = args.softcap * kLog2eFloat;
  bool ok = normal(ep.scale) && (!ep.softcap || (normal(ep.softcap_scale) && ep.softcap_scale != 0.0f));
  ep.alibi = args.alibi_slopes != nullptr;
  for (int32_t h = 0; ep.alibi && h < args.shape.num_heads; ++h) ok &= normal(args.alibi_slopes[h] * kLog2eFloat);
  for (int32_t h = 0; args.sinks != nullptr && h < args.shape.num_heads; ++h) ok &= normal(args.sinks[h] * kLog2eFloat);
  return ok;
}

// How a key tile meets the rows of one block (step 2).
struct TileClass {
  bool skip = false;           // every key is hidden from every row of the block
  bool range_partial = false;  // some key is outside some row's range (length, causality, window)
  bool mask_partial = false;   // some mask byte of the tile is 0
  bool hides_some() const { return range_partial || mask_partial; }
};

// 2. The tile [j0, j0 + nk) against rows [i_begin, i_end): by their key ranges, then by the mask bytes.
MHA_PHASE TileClass classify_tile(const KeyVisibility& vis, int32_t i_begin, int32_t i_end, int32_t j0, int32_t nk) {
  TileClass tile;
  const KeyRange some = vis.rows_union(i_begin, i_end);
  if (j0 + nk <= some.begin || j0 >= some.end) {
    tile.skip = true;
    return tile;
  }
  const KeyRange every = vis.rows_common(i_begin, i_end);
  tile.range_partial = j0 < every.begin || j0 + nk > every.end;
  if (vis.mask != nullptr) {
    bool any = false, all = true;
    for (int32_t i = i_begin; i < i_end; ++i) {
      const uint8_t* mask_row = vis.mask_row(i) + j0;
      for (int32_t j = 0; j < nk; ++j) {
        const bool on = mask_row[j] != 0;
        any |= on;
        all &= on;
      }
    }
    tile.skip = !any;
    tile.mask_partial = !all;
  }
  return tile;
}

// 5. Online softmax of one block's score tile (rows [0, round_up(brows, kRowPad)) of sp, block rows start at query
// i_begin, row state at m / l / rescale): in three passes over the block's rows: the row maxima (from
// qk_tile when no key is hidden; otherwise a pass over each row, whose dependency chains overlap), the
// running max and rescale factors of 4 rows per vector, then the exponentials and row sums.
MHA_PHASE void softmax_tile(const UnitState& st, const TileClass& tile, int32_t i_begin, int32_t brows, int32_t j0,
                            int32_t nk, bool fused_max, const bool* panel_nonfinite, float* tile_max, float* m,
                            float* l, float* alpha, const simd::Exp2Constants& ek) {
  const int32_t nk8 = round_up(nk, kNr);
  const int32_t brows_padded = round_up(brows, kRowPad);
  const KeyVisibility& vis = st.views.visibility;
  float* sp = st.scores;
  alignas(16) float m_sub[kRowsPerBlock];
  for (int32_t r = 0; r < brows_padded && !fused_max; ++r) {
    // Padding rows (r >= brows) hide only the padding keys; their results are discarded.
    const int32_t i = i_begin + r;
    const bool hide = r < brows && tile.hides_some();
    KeyRange keys{0, nk};
    if (hide && tile.range_partial) {
      const KeyRange row_keys = vis.row_range(i);
      keys = KeyRange{row_keys.begin - j0, row_keys.end - j0};
    }
    const uint8_t* mask = hide && tile.mask_partial ? vis.mask_row(i) + j0 : nullptr;
    tile_max[r] = hide_and_max_row(sp + r * kTileStride, nk, nk8, keys, mask);
  }
  for (int32_t r = 0; r < brows_padded; r += kLanes) update_running_max(tile_max + r, m + r, m_sub + r, alpha + r, ek);
  for (int32_t r = 0; r < brows_padded; ++r) {
    const float sum = exp_row(sp + r * kTileStride, nk8, m_sub[r], ek);
    // A non-finite raw score in the row's panel: poison l (see qk_tile), the reference redoes the row.
    const float l_old = panel_nonfinite[r / kMr] ? std::numeric_limits<float>::quiet_NaN() : l[r];
    l[r] = l_old * alpha[r] + sum;
  }
}

// Steps 4-6 for rows [b0, b0 + brows) of head hg of the unit against the packed key tile [j0, j0 + nk):
// Q panels (P/kMr, Dh, kMr), K^T (Dh, kTileStride), V (nk, Dv8), scores (P, kTileStride), O (P, Dv8) for
// P = round_up(brows, kRowPad).
MHA_PHASE void attend_block(const UnitState& st, const TileClass& tile, int32_t hg, int32_t b0, int32_t brows,
                            int32_t j0, int32_t nk, const simd::Exp2Constants& ek) {
  const int32_t dh = st.plan.head_dim, dv8 = st.plan.padded_value_dim;
  const int32_t nk8 = round_up(nk, kNr);
  const int32_t brows_padded = round_up(brows, kRowPad);
  const int32_t row0 = hg * st.padded_rows + b0;  // the block's first row in the unit's row buffers
  const float* qb = st.q_panels + size_t(row0) * dh;
  float* ob = st.out_acc + size_t(row0) * dv8;

  // 4. S = Q K^T, with softcap, ALiBi and bias in the micro-kernel's epilogue. Without hidden or padding
  // keys the row maxima come from there too, on registers.
  const bool fused_max = !tile.hides_some() && nk == nk8;
  bool panel_nonfinite[kRowsPerBlock / kMr];
  alignas(16) float tile_max[kRowsPerBlock];
  const AttentionArgs& args = st.args;
  const int32_t head = st.unit.kv_head * st.plan.heads_per_kv_head + hg;
  ScoreEpilogue ep = st.scores_epilogue;
  ep.first_key = j0;
  ep.nk = nk;
  if (ep.alibi) ep.alibi_slope = args.alibi_slopes[head] * kLog2eFloat;
  const float* bias_rows = nullptr;  // bias[b, h, q_begin + b0, j0]
  if (args.bias.data != nullptr) {
    bias_rows = args.bias.data + st.unit.batch * args.bias.batch_stride + head * args.bias.head_stride +
                (int64_t{st.unit.q_begin} + b0) * args.shape.kv_seq_len + j0;
  }
  for (int32_t r = 0; r < brows_padded; r += kMr) {
    float* row_max = fused_max ? tile_max + r : nullptr;
    float* panel_scores = st.scores + r * kTileStride;
    if (!st.epilogue) {
      panel_nonfinite[r / kMr] = qk_tile<false>(qb + r * dh, dh, st.k_tile, nk8, ep, panel_scores, row_max);
      continue;
    }
    ep.first_position = args.query_offset + st.unit.q_begin + b0 + r;
    if (bias_rows != nullptr) {
      for (int32_t l = 0; l < kMr; ++l) {
        ep.bias_rows[l] = r + l < brows ? bias_rows + int64_t{r + l} * args.shape.kv_seq_len : kZeroBiasRow;
      }
    }
    panel_nonfinite[r / kMr] = qk_tile<true>(qb + r * dh, dh, st.k_tile, nk8, ep, panel_scores, row_max);
  }

  // 5. Online softmax.
  softmax_tile(st, tile, st.unit.q_begin + b0, brows, j0, nk, fused_max, panel_nonfinite, tile_max, st.row_max + row0,
               st.row_sum + row0, st.rescale + row0, ek);

  // 6. O = O * alpha + P V. Keys hidden from a row enter with p = 0. A non-finite V value there turns
  // 0 * inf into NaN, and the row is then recomputed by the reference, which never reads hidden keys.
  for (int32_t r = 0; r < brows_padded; r += kMr) {
    pv_tile(st.scores + r * kTileStride, st.v_tile, dv8, nk, st.rescale + row0 + r, ob + r * dv8);
  }
}

// 7. out (B, S, H*Dv: the unit's rows of its heads) = O / l and lse (B, H, S) = (m + log2 l) ln 2 for every row
// of the unit, or the reference's row where that is not finite.
MHA_PHASE void finish_rows(const UnitState& st) {
  const AttentionArgs& args = st.args;
  const int32_t dh = st.plan.value_dim, dh8 = st.plan.padded_value_dim;  // Dv, Dv8 (O's row)
  const int32_t dh4 = dh - dh % kLanes;
  for (int32_t hg = 0; hg < st.plan.heads_per_kv_head; ++hg) {
    const int32_t head = st.unit.kv_head * st.plan.heads_per_kv_head + hg;
    for (int32_t r = 0; r < st.rows; ++r) {
      const int32_t row = hg * st.padded_rows + r;
      const int32_t i = st.unit.q_begin + r;
      const float* src = st.out_acc + size_t(row) * dh8;
      const float l = st.row_sum[row];
      // A row that saw a visible key has l >= 1 (its max key adds 2^0 = 1), so finite O gives a finite
      // O / l; anything else takes the exact per-value test.
      VecF o_check(0.0f);  // stays 0 unless some value of O is inf or NaN (0 * inf = NaN)
      int32_t d = 0;
      for (; d < dh4; d += kLanes) o_check = madd(VecF::load_aligned(src + d), VecF(0.0f), o_check);
      float tail_check = xsimd::hadd(o_check);
      MHA_TAIL_LOOP
      for (; d < dh; ++d) tail_check += src[d] * 0.0f;
      bool finite = tail_check == 0.0f && l >= 1.0f && l <= std::numeric_limits<float>::max();
      if (!finite) {
        finite = true;
        for (d = 0; d < dh; ++d) finite &= std::isfinite(src[d] / l);
      }
      // Non-finite rows (fully hidden rows, non-finite inputs, float32 overflow of the logits or of the
      // weighted sum) are rare; recomputing them with the reference gives exactly its NaN/inf semantics.
      // A row is checked before it is stored: out may be q itself, and the reference reads that row of q.
      if (!finite) {
        reference_attention_query(args, st.unit.batch, head, i, st.reference_acc);
        continue;
      }
      if (args.lse != nullptr) {
        const float m = st.row_max[row];  // log2 units
        args.lse[(int64_t{st.unit.batch} * args.shape.num_heads + head) * args.shape.seq_len + i] =
            (m + std::log2(l)) * kLn2;
      }
      float* dst = st.views.out + i * args.out.row_stride + hg * dh;
#if MHA_VARIANT_RELAXED
      // One division per row, then products (within 1.5 ulp of O / l where the division is 0.5): a row's
      // Dh/4 f32x4.div were 1-2% of bert's time, and this variant's results differ in the last bits anyway.
      const float inv_l = 1.0f / l;
      const VecF vinv(inv_l);
      for (d = 0; d < dh4; d += kLanes) (VecF::load_aligned(src + d) * vinv).store_unaligned(dst + d);
      MHA_TAIL_LOOP
      for (; d < dh; ++d) dst[d] = src[d] * inv_l;
#else
      const VecF vl(l);
      for (d = 0; d < dh4; d += kLanes)
        (VecF::load_aligned(src + d) / vl).store_unaligned(dst + d);  // exact, as scalar
      MHA_TAIL_LOOP
      for (; d < dh; ++d) dst[d] = src[d] / l;
#endif
    }
  }
}

// Rope on the packed Q panels of one head (rows [0, rows) of the unit, panel layout of pack_q_panels): each
// row rotated at its position query_offset + q_begin + r. Padding rows stay 0.
void rotate_q_panels(const AttentionArgs& args, const WorkUnit& unit, int32_t rows, int32_t dh, float* qp) {
  for (int32_t r = 0; r < rows; ++r) {
    rotate_head(qp + (r / kMr) * dh * kMr + r % kMr, kMr, args.rope, int64_t{args.query_offset} + unit.q_begin + r);
  }
}

// Rope on the packed K^T tile (layout of pack_k_transposed): key j at position j0 + j. Padding keys stay 0.
void rotate_k_tile(const RotaryTables& rope, int32_t j0, int32_t nk, int32_t dh, float* kt) {
  for (int32_t j = 0; j < nk; ++j) rotate_head(kt + (j / kNr) * dh * kNr + j % kNr, kNr, rope, j0 + j);
}

// O = 0, and m, l of every row of head h at its sink's term (m = sink[h] * log2(e), l = 1) or empty
// (m = -inf, l = 0).
void start_rows(const UnitState& st) {
  const int32_t heads = st.plan.heads_per_kv_head;
  const size_t unit_rows = size_t(heads) * st.padded_rows;
  std::fill(st.out_acc, st.out_acc + unit_rows * st.plan.padded_value_dim, 0.0f);
  const float* sinks = st.args.sinks;
  for (int32_t hg = 0; hg < heads; ++hg) {
    const size_t first = size_t(hg) * st.padded_rows;
    std::fill_n(st.row_max + first, st.padded_rows,
                sinks ? sinks[st.unit.kv_head * heads + hg] * kLog2eFloat : kNegInf);
    std::fill_n(st.row_sum + first, st.padded_rows, sinks ? 1.0f : 0.0f);
  }
}

void run_unit(const AttentionArgs& args, const KernelPlan& plan, const WorkUnit& unit, float* scratch) {
  const ScratchLayout& lay = plan.scratch;
  const int32_t rows = unit.q_end - unit.q_begin;
  UnitState st{args,
               plan,
               unit,
               unit_views(args, plan, unit),
               rows,
               round_up(rows, kRowPad),
               scratch + lay.q_panels,
               scratch + lay.k_tile,
               scratch + lay.v_tile,
               scratch + lay.scores,
               scratch + lay.out_acc,
               scratch + lay.row_max,
               scratch + lay.row_sum,
               scratch + lay.rescale,
               reinterpret_cast<double*>(scratch + lay.reference),
               false,
               ScoreEpilogue{}};
  const int32_t heads = plan.heads_per_kv_head;
  const int32_t dh = plan.head_dim;

  const simd::TanhConstants tanh_constants;
  st.scores_epilogue.tanh = &tanh_constants;
  if (!fold_constants(args, st.scores_epilogue)) {
    for (int32_t hg = 0; hg < heads; ++hg) {
      for (int32_t i = unit.q_begin; i < unit.q_end; ++i) {
        reference_attention_query(args, unit.batch, unit.kv_head * heads + hg, i, st.reference_acc);
      }
    }
    return;
  }
  st.epilogue = st.scores_epilogue.softcap || st.scores_epilogue.alibi || args.bias.data != nullptr;

  // 1. Q panels of every head of the unit; O, m and l start empty.
  const int64_t q_stride = args.q.row_stride;
  for (int32_t hg = 0; hg < heads; ++hg) {
    float* panels = st.q_panels + size_t(hg) * st.padded_rows * dh;
    pack_q_panels(st.views.q + unit.q_begin * q_stride + hg * dh, q_stride, rows, dh, panels);
    if (args.rope.enabled()) rotate_q_panels(args, unit, rows, dh, panels);
  }
  start_rows(st);

  const simd::Exp2Constants exp_constants;
  const KeyVisibility& vis = st.views.visibility;
  const int32_t T = args.shape.kv_seq_len;
  // Tiles that no row of the unit may see (causal: keys >= q_end) are never visited; the tiles visited
  // lie on the grid of multiples of keys_per_tile.
  const KeyRange unit_keys = vis.rows_union(unit.q_begin, unit.q_end);
  const int32_t first_tile = unit_keys.begin / plan.keys_per_tile * plan.keys_per_tile;
  for (int32_t j0 = first_tile; j0 < unit_keys.end; j0 += plan.keys_per_tile) {
    const int32_t nk = std::min(plan.keys_per_tile, T - j0);
    bool packed = false;
    // The unit's rows in blocks sharing this tile's packed K^T and V (V is packed once per tile, so the
    // PV micro-kernel reads whole aligned vectors at immediate offsets instead of rows D apart).
    for (int32_t b0 = 0; b0 < rows; b0 += plan.rows_per_block) {
      const int32_t brows = std::min(plan.rows_per_block, rows - b0);
      const int32_t i_begin = unit.q_begin + b0;
      // 2. Classify the tile against the block's rows.
      const TileClass tile = classify_tile(vis, i_begin, i_begin + brows, j0, nk);
      if (tile.skip) continue;
      // 3. Pack K^T and V of the tile, once.
      if (!packed) {
        pack_k_transposed(st.views.k + j0 * args.k.row_stride, args.k.row_stride, nk, dh, st.k_tile);
        if (args.rope.enabled()) rotate_k_tile(args.rope, j0, nk, dh, st.k_tile);
        pack_v(st.views.v + j0 * args.v.row_stride, args.v.row_stride, nk, plan.value_dim, plan.padded_value_dim,
               st.v_tile);
        packed = true;
      }
      // 4-6. Every head of the group against the packed tile, while it is hot in cache.
      for (int32_t hg = 0; hg < heads; ++hg) attend_block(st, tile, hg, b0, brows, j0, nk, exp_constants);
    }
  }

  // 7. Finish the rows.
  finish_rows(st);
}

}  // namespace

extern const KernelVariant kKernel;
const KernelVariant kKernel{MHA_SIMD_VARIANT_NAME, &plan, &run_unit};

}  // namespace MHA_SIMD_VARIANT
}  // namespace mha
