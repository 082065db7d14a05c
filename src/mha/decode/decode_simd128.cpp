// The SIMD decode kernel (xsimd; WebAssembly SIMD128 when compiled with Emscripten), compiled per SIMD
// variant in its namespace (MHA_SIMD_VARIANT, simd_exp.hpp) and listed in kernel_table.cpp: one work item
// of decode_kernel.hpp, the rows of one (batch item, KV head) against one block of at most 512 keys, in
// four phases:
//   1. pack q: rows in chunks of 4, each chunk a panel (Dh, 4) so one step broadcasts 4 adjacent floats;
//   2. scores (rows, keys) = q . k, panel by panel (32 keys of K^T, kv_cache.hpp), each panel (or 8-key
//      strip of it, qk_chunks) used by every row chunk while it is in L1: a micro-kernel of R rows x 8P
//      keys, R*2P accumulators (R = 1: 32 keys);
//   3. per row: log2-unit scores (scale, softcap with simd_tanh.hpp, ALiBi), hidden keys -inf, max m,
//      p = 2^(s - m), sum l;
//   4. o (rows, Dh8) = p V, 32 keys at a time, a micro-kernel of R rows x 8L lanes (R = 1: 32 lanes).
// The softmax of a block is two-pass (its scores fit in scratch), so no running rescale; blocks are
// merged by the driver. How a block reads the cache (loaders, staged tiles, a first read into L2) is
// chosen by choose_decode_path (decode_path.hpp); the loaders and micro-kernels are in
// decode_simd128_micro.hpp.
#include <algorithm>
#include <cmath>
#include <iterator>  // std::size
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "mha/decode/decode.hpp"
#include "mha/decode/decode_kernel.hpp"
#include "mha/cache/cache_codecs.hpp"  // q8::blocks
#include "mha/decode/decode_path.hpp"
#include "mha/decode/decode_simd128_micro.hpp"
#include "mha/decode/decode_simd128_int8.hpp"
#define MHA_INTEGER_SIMD 1
#include "mha/decode/decode_integer.hpp"
#include "mha/core/f16.hpp"
#include "mha/core/numeric.hpp"
#include "mha/simd/simd_exp.hpp"
#include "mha/simd/simd_tanh.hpp"
#include "mha/core/test_seam.hpp"
#include "mha/core/workspace.hpp"

#ifdef MHA_PROFILE_NOINLINE  // profiling builds only: keeps each phase a separate function for perf
#define MHA_PHASE __attribute__((noinline))
#else
#define MHA_PHASE
#endif

namespace mha {
namespace MHA_SIMD_VARIANT {
namespace {

struct Layout {
  size_t q = 0, s = 0, k_stage = 0, v_stage = 0, total = 0;
};

Layout make_layout(int32_t dh, int32_t dv) {
  const size_t dh8 = static_cast<size_t>(round_up(dh, 8)), dv8 = static_cast<size_t>(round_up(dv, 8));
  Layout lay;
  ScratchCursor cursor;
  lay.q = cursor.take(size_t(kMaxChunks) * dh * kChunk);    // q chunks as panels (Dh, 4)
  lay.s = cursor.take(size_t(kDecodeMaxRowsPerItem) * kS);  // scores, then weights (rows, kS)
  lay.k_stage = cursor.take(size_t(kKeysPerPanel) * dh8);   // one widened K panel (Dh, P)
  lay.v_stage = cursor.take(size_t(kKeysPerPanel) * dv8);   // one widened V tile (P, Dv8), or int8's o and weights
  lay.total = cursor.at;
  return lay;
}

// ---------------------------------------------------------------------------------------------------
// Phases

// Phase 1: qp[c * Dh * 4 + d * 4 + r % 4] = q_scale * q of row r = 4c + r % 4 (q_scale is 1, or 2^112
// for |q| <= kMaxFoldableQ: exact).
MHA_PHASE void pack_q(const DecodeBlock& blk, float q_scale, float* qp) {
  for (int32_t r = 0; r < blk.rows; ++r) {
    float* panel = qp + (r / kChunk) * blk.head_dim * kChunk + r % kChunk;
    const float* q = blk.q_rows[r];
    for (int32_t d = 0; d < blk.head_dim; ++d) panel[d * kChunk] = q[d] * q_scale;
  }
}

// Largest q for which q * 2^112 stays finite with a margin (f16 scores fold 2^112 into q).
constexpr float kMaxFoldableQ = 16384.0f;

// Whether every q element of the block's rows is finite and at most kMaxFoldableQ, so that the float16
// widening's 2^112 can be folded into q (DecodePath::fold_q).
bool q_foldable(const DecodeBlock& blk) {
  for (int32_t r = 0; r < blk.rows; ++r) {
    for (int32_t d = 0; d < blk.head_dim; ++d) {
      if (!(std::fabs(blk.q_rows[r][d]) <= kMaxFoldableQ)) return false;  // NaN too
    }
  }
  return true;
}

// Before phase 2 of a compute-bound item (DecodePath::touch_block): one load of every 64-byte line of the
// block's K panels and V rows (Elem: the cache's element), in address order, OR-ed into the value
// returned (kept by the caller, since wasm has no prefetch). The lines are then in L2 when the
// micro-kernels read them: a loop of nothing but loads keeps many more misses in flight than
// micro-kernels that need one new line every few steps of arithmetic (the out-of-order window covers
// only a few steps), so the block streams in at close to the memory's speed. K and V are read side by
// side, 4 lines of each per iteration, so that both streams are in flight at once.
inline void touch_lines(const char* lines, int64_t from, int64_t to, int32_t& touched) {
  for (int64_t at = from; at < to; at += 64) touched |= *reinterpret_cast<const int32_t*>(lines + at);
}

template <class Elem>
MHA_PHASE int32_t touch_block(const DecodeBlock& blk, int32_t base) {
  constexpr int64_t kStep = 4 * 64;
  const int32_t panels = (blk.key_end - base + kKeysPerPanel - 1) / kKeysPerPanel;
  const auto* keys = static_cast<const char*>(blk.key_panels) +
                     key_panel_offset(base, 0, blk.head_dim) * int64_t{sizeof(Elem)};  // base: a panel start
  const auto* values = static_cast<const char*>(blk.value_rows) + int64_t{blk.key_begin} * blk.dv8 * sizeof(Elem);
  const int64_t key_bytes = int64_t{panels} * kKeysPerPanel * blk.head_dim * sizeof(Elem);
  const int64_t value_bytes = int64_t{blk.key_end - blk.key_begin} * blk.dv8 * sizeof(Elem);
  int32_t touched = 0;
  const int64_t both = std::min(key_bytes, value_bytes) / kStep * kStep;
  for (int64_t at = 0; at < both; at += kStep) {
    touch_lines(keys, at, at + kStep, touched);
    touch_lines(values, at, at + kStep, touched);
  }
  touch_lines(keys, both, key_bytes, touched);
  touch_lines(values, both, value_bytes, touched);
  return touched;
}

// Phase 2: s[r * kS + j - base] = q_r . k_j for the panels covering [base, key_end), base = the panel
// start at or before key_begin.
// stage: read each panel once into k_stage (ld must then give true values) and run every chunk on that.
template <class Ld>
MHA_PHASE void block_scores(const DecodeBlock& blk, int32_t base, const float* qp, float* s, float* k_stage,
                            const Ld& ld, bool stage) {
  using Elem = typename Ld::Elem;
  const int32_t dh = blk.head_dim;
  const int32_t panels = (blk.key_end - base + kKeysPerPanel - 1) / kKeysPerPanel;
  const Elem* panel = static_cast<const Elem*>(blk.key_panels) + key_panel_offset(base, 0, dh);  // base: a panel start
  // Scaled halves never score one row (choose_decode_path gives it F16PairLoader): no such copy of the loop.
  constexpr bool kOneRow = !std::is_same<Ld, F16Loader<false, true>>::value && !std::is_same<Ld, BF16Loader>::value;
  if (kOneRow && blk.rows == 1 && !stage) {  // the memory-bound one-row step: touch V ahead (qk_row_touching)
    const Elem* values = static_cast<const Elem*>(blk.value_rows);
    const char* touch = reinterpret_cast<const char*>(values + int64_t{base} * blk.dv8);
    const char* touch_last = reinterpret_cast<const char*>(values + int64_t{blk.key_end} * blk.dv8) - 16;
    int32_t touched = 0;
    for (int32_t pi = 0; pi < panels; ++pi, panel += int64_t{dh} * kKeysPerPanel)
      qk_row_touching(qp, panel, dh, s + pi * kKeysPerPanel, ld, touch, touch_last, touched);
    *reinterpret_cast<int32_t*>(k_stage) = touched;  // keeps the touches
    return;
  }
  if constexpr (!kPairs<Ld>) {  // F16PairLoader: one row only (choose_decode_path), scored above
    const F32Loader widened;
    for (int32_t pi = 0; pi < panels; ++pi, panel += int64_t{dh} * kKeysPerPanel) {
      float* s_panel = s + pi * kKeysPerPanel;
      if (stage) {
        widen_rows(panel, dh, kKeysPerPanel, kKeysPerPanel / 8, k_stage, ld);
        qk_chunks(blk, qp, k_stage, s_panel, widened);
      } else {
        qk_chunks(blk, qp, panel, s_panel, ld);
      }
    }
  }
}

// Phase 3, one row: the scores of lanes [g0, g1) (4-aligned, covering [key_begin, key_end)) become
// weights p = 2^(s - m'), stored times p_scale (1, or 2^112 for values read as scaled halves); keys outside
// [first, last] get p = 0. Returns m; *l = sum of p.
float row_softmax(const DecodeBlock& blk, int32_t r, int32_t base, int32_t g0, int32_t g1, float p_scale, float* row,
                  float* l, const simd::Exp2Constants& ek, const simd::TanhConstants& tk) {
  const int32_t first = std::max(blk.visible[r].first, blk.key_begin);
  const int32_t last = std::min(blk.visible[r].last, blk.key_end - 1);
  if (blk.softcap_in != 0.0f) {
    const VecF cap_in(blk.softcap_in), cap_out(blk.softcap_out);
    for (int32_t j = g0; j < g1; j += kLanes)
      (cap_out * simd::tanh(VecF::load_aligned(row + j) * cap_in, tk)).store_aligned(row + j);
  }
  const VecF scale(blk.softcap_in != 0.0f ? 1.0f : blk.score_scale);
  const bool alibi = blk.alibi != nullptr;
  const VecF slope(alibi ? blk.alibi[r] : 0.0f);
  const VecI lane_offsets{0, 1, 2, 3};
  const VecI vfirst(first - base), vlast(last - base);
  const VecI vposition(alibi ? blk.position[r] - base : 0);
  VecF vmax(kNegInf);
  for (int32_t j = g0; j < g1; j += kLanes) {
    const VecI lane = VecI(j) + lane_offsets;
    VecF x = VecF::load_aligned(row + j) * scale;
    if (alibi) x -= slope * xsimd::abs(xsimd::to_float(vposition - lane));
    const auto hidden = (lane < vfirst) | (lane > vlast);
    x = xsimd::select(xsimd::bool_cast(hidden), VecF(kNegInf), x);
    x.store_aligned(row + j);
    vmax = simd::pseudo_max(vmax, x);
  }
  alignas(16) float lanes[kLanes];
  vmax.store_aligned(lanes);
  const float m = std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
  const VecF m_sub(m == kNegInf ? 0.0f : m);  // nothing visible: -inf - 0 stays -inf, p = 0
  const VecF stored_scale(p_scale);
  VecF sum(0.0f);
  for (int32_t j = g0; j < g1; j += kLanes) {
    const VecF p = simd::exp2_nonpositive(VecF::load_aligned(row + j) - m_sub, ek);
    (p * stored_scale).store_aligned(row + j);
    sum += p;
  }
  *l = xsimd::hadd(sum);
  return m;
}

MHA_PHASE void block_softmax(const DecodeBlock& blk, int32_t base, float p_scale, float* s) {
  const simd::Exp2Constants ek;
  const simd::TanhConstants tk;
  const int32_t g0 = (blk.key_begin - base) / kLanes * kLanes;
  const int32_t g1 = round_up(blk.key_end - base, kLanes);
  for (int32_t r = 0; r < blk.rows; ++r)
    blk.m[r] = row_softmax(blk, r, base, g0, g1, p_scale, s + r * kS, blk.l + r, ek, tk);
}

// Phase 4: o = p V over keys [key_begin, key_end), tile by tile (tiles end on panel boundaries). stage:
// as block_scores, per V tile.
template <class Ld>
MHA_PHASE void block_values(const DecodeBlock& blk, int32_t base, const float* s, float* v_stage, const Ld& ld,
                            bool stage) {
  using Elem = typename Ld::Elem;
  const int32_t dh8 = blk.dv8;
  std::fill(blk.o, blk.o + int64_t{blk.rows} * dh8, 0.0f);
  // One float16 row, read directly: all keys in one sweep (the step is memory-bound and its V rows were
  // touched during the K pass), then the sums put back in lane order once.
  if constexpr (kPairs<Ld>) {
    const Elem* v = static_cast<const Elem*>(blk.value_rows) + int64_t{blk.key_begin} * dh8;
    pv_rows<1>(s + (blk.key_begin - base), v, dh8, blk.key_end - blk.key_begin, blk.o, ld);
    for (int32_t c = 0; c < dh8; c += 8)
      store_pairs(VecF::load_aligned(blk.o + c), VecF::load_aligned(blk.o + c + kLanes), blk.o + c);
    return;
  }
  const F32Loader widened;
  for (int32_t t0 = blk.key_begin; t0 < blk.key_end;) {
    const int32_t t1 = std::min(blk.key_end, (t0 / kKeysPerPanel + 1) * kKeysPerPanel);
    const int32_t nk = t1 - t0;
    const Elem* v = static_cast<const Elem*>(blk.value_rows) + int64_t{t0} * dh8;
    const float* p = s + (t0 - base);
    if (stage) {
      widen_rows(v, nk, dh8, dh8 / 8, v_stage, ld);
      pv_chunks(blk, p, v_stage, nk, widened);
    } else {
      pv_chunks(blk, p, v, nk, ld);
    }
    t0 = t1;
  }
}

// The four phases with the loaders of scores (KLd) and values (VLd), as `path` says (decode_path.hpp).
// Phases run unless the test seam's phase mask skips them (test_seam.hpp: the phase-timing harnesses).
template <class KLd, class VLd>
void run_phases(const DecodeBlock& blk, float* scratch, const DecodePath& path) {
  const Layout lay = make_layout(blk.head_dim, blk.value_dim);
  const int32_t base = blk.key_begin / kKeysPerPanel * kKeysPerPanel;
  const KLd kld;
  const VLd vld;
  if (MHA_DECODE_PHASE_RUNS(1)) pack_q(blk, path.fold_q ? f16::kWidenScale : 1.0f, scratch + lay.q);
  if (MHA_DECODE_PHASE_RUNS(2) && path.touch_block) {  // the stored value keeps the loads
    *reinterpret_cast<int32_t*>(scratch + lay.k_stage) = touch_block<typename KLd::Elem>(blk, base);
  }
  if (MHA_DECODE_PHASE_RUNS(2))
    block_scores(blk, base, scratch + lay.q, scratch + lay.s, scratch + lay.k_stage, kld, path.stage_k);
  if (MHA_DECODE_PHASE_RUNS(4)) {
    block_softmax(blk, base, path.p_scale, scratch + lay.s);
  } else {
    std::fill(blk.m, blk.m + blk.rows, 0.0f), std::fill(blk.l, blk.l + blk.rows, 1.0f);  // a finite partial
  }
  if (MHA_DECODE_PHASE_RUNS(8)) {
    block_values(blk, base, scratch + lay.s, scratch + lay.v_stage, vld, path.stage_v);
  } else {
    std::fill(blk.o, blk.o + int64_t{blk.rows} * blk.dv8, 0.0f);
  }
}

// int8, 2 or more rows (DecodeLoader::kInt8), and int4 at any rows (kInt4): each K panel and V tile widened
// with its scales into L1 (int4: unpacked to int8 first, into the integer path's tiles, which share no
// scratch with this layout's), then the float32 micro-kernels.
void run_int8(const DecodeBlock& blk, float* scratch, const DecodePath&) {
  const Layout lay = make_layout(blk.head_dim, blk.value_dim);
  const int32_t dh = blk.head_dim, dv8 = blk.dv8;
  const int32_t nbk = q8::blocks(dh), nbv = q8::blocks(blk.value_dim);
  const int32_t base = blk.key_begin / kKeysPerPanel * kKeysPerPanel;
  const F32Loader widened;
  float* s = scratch + lay.s;
  float* k_stage = scratch + lay.k_stage;
  float* v_stage = scratch + lay.v_stage;
  pack_q(blk, 1.0f, scratch + lay.q);
  const int32_t panels = (blk.key_end - base + kKeysPerPanel - 1) / kKeysPerPanel;
  const bool int4 = blk.dtype == CacheDType::kInt4;
  const integer_decode::Layout tiles = integer_decode::layout(dh, blk.value_dim);
  auto* k_tile = reinterpret_cast<int8_t*>(scratch + lay.total + tiles.k_tile);
  auto* v_tile = reinterpret_cast<int8_t*>(scratch + lay.total + tiles.v_tile);
  const auto* keys = static_cast<const int8_t*>(blk.key_panels);
  for (int32_t pi = 0; pi < panels; ++pi) {
    const int32_t panel = base / kKeysPerPanel + pi;
    const int8_t* panel8 = keys + key_panel_offset(panel * kKeysPerPanel, 0, dh);
    if (int4) {
      integer_decode::unpack_int4_panel(static_cast<const uint8_t*>(blk.key_panels) + int64_t{panel} * dh * 16, dh,
                                        k_tile);
      panel8 = k_tile;
    }
    widen_int8_panel(panel8, blk.key_scales + int64_t{panel} * nbk * kKeysPerPanel, dh, k_stage);
    qk_chunks(blk, scratch + lay.q, k_stage, s + pi * kKeysPerPanel, widened);
  }
  block_softmax(blk, base, 1.0f, s);
  std::fill(blk.o, blk.o + int64_t{blk.rows} * dv8, 0.0f);
  const auto* values = static_cast<const int8_t*>(blk.value_rows);
  for (int32_t t0 = blk.key_begin; t0 < blk.key_end;) {
    const int32_t t1 = std::min(blk.key_end, (t0 / kKeysPerPanel + 1) * kKeysPerPanel);
    const int8_t* rows = values + int64_t{t0} * dv8;
    if (int4) {
      integer_decode::unpack_int4_rows(static_cast<const uint8_t*>(blk.value_rows) + int64_t{t0} * (dv8 / 2), t1 - t0,
                                       dv8, v_tile);
      rows = v_tile;
    }
    widen_int8_rows(rows, blk.value_scales + int64_t{t0} * nbv, t1 - t0, dv8, nbv, v_stage);
    pv_chunks(blk, s + (t0 - base), v_stage, t1 - t0, widened);
    t0 = t1;
  }
}

// int8, one row (DecodeLoader::kInt8Row; every |q| <= kMaxFoldableQ): the scores panel by panel with
// the scales folded per block and the V rows touched ahead, the softmax, then o = p V in one sweep of
// the keys with the scales folded into the weights, put back in lane order and unscaled (2^-24) once.
// o's sums carry the widening's 2^24, so values past about 2^103 / T can overflow them where the true o
// is finite (|v| > 10^27): the row's result is then not finite, and the driver gives it the exact path
// (decode.cpp), as for any float32 overflow.
void run_int8_row(const DecodeBlock& blk, float* scratch, const DecodePath&) {
  const Layout lay = make_layout(blk.head_dim, blk.value_dim);
  const int32_t dh = blk.head_dim, dv8 = blk.dv8, dv16 = round_up(dv8, 16);
  const int32_t nbk = q8::blocks(dh), nbv = q8::blocks(blk.value_dim);
  const int32_t base = blk.key_begin / kKeysPerPanel * kKeysPerPanel;
  float* s = scratch + lay.s;
  float* sums = scratch + lay.k_stage;       // one panel's 32 scores, strided; then the touches
  float* o_strided = scratch + lay.v_stage;  // (Dv16)
  float* weights = o_strided + dv16;         // kInt8RowWeights keys' weights
  // Both fit the V stage (kKeysPerPanel * Dv8 floats): Dv16 <= Dv8 + 8, and Dv8 >= 8.
  static_assert((kKeysPerPanel - 1) * 8 >= 8 + kInt8RowWeights, "the int8 row's o and weights fit the V stage");
  pack_q(blk, 1.0f, scratch + lay.q);
  const auto* keys = static_cast<const int8_t*>(blk.key_panels);
  const auto* values = static_cast<const int8_t*>(blk.value_rows);
  const char* touch = reinterpret_cast<const char*>(values + int64_t{base} * dv8);
  const char* touch_last = reinterpret_cast<const char*>(values + int64_t{blk.key_end} * dv8) - sizeof(int32_t);
  int32_t touched = 0;
  const Int8Widener widen;
  const int32_t panels = (blk.key_end - base + kKeysPerPanel - 1) / kKeysPerPanel;
  for (int32_t pi = 0; pi < panels; ++pi) {
    const int32_t panel = base / kKeysPerPanel + pi;
    qk_int8_row(scratch + lay.q, keys + key_panel_offset(panel * kKeysPerPanel, 0, dh),
                blk.key_scales + int64_t{panel} * nbk * kKeysPerPanel, dh, s + pi * kKeysPerPanel, sums, widen, touch,
                touch_last, touched);
  }
  *reinterpret_cast<int32_t*>(sums + kKeysPerPanel) = touched;  // keeps the touches
  block_softmax(blk, base, 1.0f, s);
  pv_int8_row(s + (blk.key_begin - base), values + int64_t{blk.key_begin} * dv8,
              blk.value_scales + int64_t{blk.key_begin} * nbv, dv8, nbv, blk.key_end - blk.key_begin, o_strided,
              weights, widen);
  alignas(16) float lanes[16];
  const VecF unscale(kInt8Unscale);
  for (int32_t c = 0; c < dv8; c += 16) {
    VecF w[4];
    for (int m = 0; m < 4; ++m) w[m] = VecF::load_aligned(o_strided + c + kLanes * m) * unscale;
    store_strided(w, lanes);
    std::copy(lanes, lanes + std::min(16, dv8 - c), blk.o + c);
  }
}

// The float layout, then the integer path's (whose int4 tiles run_int8 also uses).
size_t scratch_floats(int32_t head_dim, int32_t value_dim) {
  return make_layout(head_dim, value_dim).total + integer_decode::layout(head_dim, value_dim).total;
}

void run_integer(const DecodeBlock& blk, float* scratch, const DecodePath&) { integer_decode::run(blk, scratch); }

void run_scalar_kernel(const DecodeBlock& blk, float* scratch, const DecodePath&) {
  scalar::kDecodeKernel.run(blk, scratch);
}

// One function per path, indexed by DecodeLoader and called through this table: V8 optimizes a wasm
// function as a whole, and a direct call to a function with one caller is inlined by wasm-opt (whatever
// clang's noinline says), so a switch gave one function holding every path, whose float16 and bfloat16
// one-row loops ran 0.82-0.87x as fast once the int8 one-row path had joined it.
using PathRunner = void (*)(const DecodeBlock&, float*, const DecodePath&);
constexpr PathRunner kPathRunners[] = {
    run_phases<F32Loader, F32Loader>,                            // kFloat32
    run_phases<F16Loader<false, true>, F16Loader<false, true>>,  // kFloat16Scaled
    run_phases<F16PairLoader, F16PairLoader>,                    // kFloat16Pairs
    run_phases<BF16Loader, BF16Loader>,                          // kBFloat16
    run_phases<BF16PairLoader, BF16PairLoader>,                  // kBFloat16Pairs
    run_int8,                                                    // kInt8
    run_int8_row,                                                // kInt8Row
    run_int8,                                                    // kInt4
    run_integer,                                                 // kInteger
    run_scalar_kernel,                                           // kScalarKernel
};
static_assert(std::size(kPathRunners) == static_cast<size_t>(DecodeLoader::kScalarKernel) + 1, "one runner per loader");

void run(const DecodeBlock& blk, float* scratch) {
  const DecodePath path = choose_decode_path(blk);
  kPathRunners[static_cast<size_t>(path.loader)](blk, scratch, path);
}

}  // namespace

// float32 read directly by the micro-kernels: one row (the memory-bound MHA step) reads whole panel rows
// per step and touches its V rows during the K pass; 1- or 2-row chunks read value rows whole (pv_rows).
// 2 rows stage each K panel (their strided sweeps would each start with misses); 3 or more rows first
// read the whole block into L2 and then read it directly, since a staged copy of data already in L2
// costs more than the strided sweeps it saves.
// float16 is widened in registers, its 2^112 folded into q and into the stored weights (scaling by 2^112
// and 2^-112 is exact, so the products are those of unscaled halves). One row reads K and V through
// F16PairLoader (no interleaves: its passes are bound by the widening's instructions). 2 rows stage the
// K panels; 3 or more stage the V tiles, and the K panels when there are several chunks (a single chunk
// reads each half panel row, one 64-byte line, directly).
// bfloat16 is exact in registers (a mask or a shift per 4 values), so it takes the float16 paths without
// a fold or a cold case. int8: one row folds each block's scale into the dot products and the weights,
// reading the int8 values widened in registers (run_int8_row); 2 or more rows widen each panel and tile
// with its scales into L1 once (run_int8), since every 4-row chunk reads it again. int4 takes run_int8 at
// every row count, its nibbles unpacked to int8 first. A cache of integer arithmetic takes run_integer
// (decode_integer.hpp), whatever its rows: its bits must not depend on the path.
// Two cold float16 cases go to the scalar kernel, so that every SIMD module carries only the loaders above
// (issue #15's package size): blocks over inf/NaN halves (a float16 cache holds them only after a
// non-finite k/v or one past 65504), and q that cannot take the 2^112 (some |q| > kMaxFoldableQ, or not
// finite: such q overflows float32 scores against any but tiny keys). decode.cpp sizes each worker's
// scratch for both kernels.
DecodePath choose_decode_path(const DecodeBlock& blk) {
  DecodePath path;
  if (blk.integer) {
    path.loader = DecodeLoader::kInteger;
    return path;
  }
  if (blk.dtype == CacheDType::kFloat32) {
    path.loader = DecodeLoader::kFloat32;
    path.touch_block = blk.rows > 2;
    path.stage_k = blk.rows == 2;
    return path;
  }
  if (blk.dtype == CacheDType::kBFloat16) {  // exact for every value (inf/NaN too): no fold, no cold case
    path.loader = blk.rows == 1 ? DecodeLoader::kBFloat16Pairs : DecodeLoader::kBFloat16;
    path.stage_k = blk.rows > 1 && (blk.rows == 2 || blk.rows > kChunk);
    path.stage_v = blk.rows > 2;
    return path;
  }
  if (blk.dtype == CacheDType::kInt8) {
    const bool row = blk.rows == 1 && q_foldable(blk);  // the one-row fold's bound on q (run_int8_row)
    path.loader = row ? DecodeLoader::kInt8Row : DecodeLoader::kInt8;
    path.stage_k = path.stage_v = !row;
    return path;
  }
  if (blk.dtype == CacheDType::kInt4) {
    path.loader = DecodeLoader::kInt4;
    path.stage_k = path.stage_v = true;
    return path;
  }
  if (blk.specials || !q_foldable(blk)) {
    path.loader = DecodeLoader::kScalarKernel;
    return path;
  }
  path.fold_q = true;
  path.p_scale = f16::kWidenScale;
  if (blk.rows == 1) {
    path.loader = DecodeLoader::kFloat16Pairs;
    return path;
  }
  path.loader = DecodeLoader::kFloat16Scaled;
  path.stage_k = blk.rows == 2 || blk.rows > kChunk;
  path.stage_v = blk.rows > 2;
  return path;
}

extern const DecodeKernel kDecodeKernel;  // listed by kernel_table.cpp
const DecodeKernel kDecodeKernel{MHA_SIMD_VARIANT_NAME, &scratch_floats, &run};

}  // namespace MHA_SIMD_VARIANT
}  // namespace mha
