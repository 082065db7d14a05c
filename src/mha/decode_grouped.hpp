// The grouped path of the SIMD decode kernel (decode_simd128.cpp): float32 items of 3 or 4 rows (G = H/Hkv
// query heads, times the queries: one chunk), whose K panels and V tiles are staged into L1 scratch. The
// chunk switches take 3 or 4 rows: run() sends it one chunk only (see there). Not a header of its
// own: decode_simd128.cpp includes it inside its anonymous namespace, after the phases it reuses (pack_q,
// block_softmax, widen_rows, the micro-kernels).
//
// Why a pipeline: a staged tile is read from memory in one linear sweep and then computed on from L1. Done
// one after the other, the core streams while it does not compute and computes while nothing streams:
// decode-gqa-4k (G = 4) cost about the sum of its memory time and its mul+add time. Here the copy of the
// NEXT panel (or tile) runs inside the micro-kernels of the current one, one group of 8 elements per
// step of their loops, so the loads that miss overlap the multiply-adds and the hardware prefetcher sees
// a steady stream. Panel p and p+1 use the two stage buffers in turn; the last K panel streams the
// first V tile in, so only a block's first panel is copied on its own. The copy does the same work as
// widen_rows (the same loads, stores and widening), only in another order: the results are unchanged.
// Interleaved A/B in wasm against run_phases (300 rounds, a machine loaded 8x): decode-gqa-4k f32 1.11x
// median per round, decode-b4 f32 1.12x, decode-mqa-8k f32 0.99x (again 0.97x: MQA keeps run_phases).
// The float16 cache keeps run_phases: the same pipeline widening halves measured 0.91x (b4) to 1.04x
// (gqa-4k), and with the folded 2^112 on decode-mqa-8k 0.99x.

// The rest of a contiguous copy (or widening) of 8-element groups into a stage buffer.
template <class Ld>
struct StageStream {
  const typename Ld::Elem* src = nullptr;
  float* dst = nullptr;
  int32_t groups = 0;  // groups of 8 elements left
};

template <class Ld>
inline void stream_group(const typename Ld::Elem*& src, float*& dst, int32_t& groups, const Ld& ld) {
  if (groups <= 0) return;
  VecF lo, hi;
  ld.load8(src, lo, hi);
  lo.store_aligned(dst);
  hi.store_aligned(dst + kLanes);
  src += 8, dst += 8, --groups;
}

template <class Ld>
inline void stream_drain(StageStream<Ld>& st, const Ld& ld) {
  while (st.groups > 0) stream_group(st.src, st.dst, st.groups, ld);
}

// qk_micro on a staged panel (floats), copying one group of the stream per step of d.
template <int R, int P, class Ld>
inline void qk_micro_streamed(const float* qpanel, const float* panel, int32_t dh, float* s, StageStream<Ld>& st, const Ld& ld) {
  const typename Ld::Elem* src = st.src;
  float* dst = st.dst;
  int32_t groups = st.groups;
  VecF acc[R][2 * P];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < 2 * P; ++x) acc[r][x] = VecF(0.0f);
  for (int32_t d = 0; d < dh; ++d, qpanel += kChunk, panel += kP) {
    stream_group(src, dst, groups, ld);
    VecF b[R];
    for (int r = 0; r < R; ++r) b[r] = VecF(qpanel[r]);
    for (int p = 0; p < P; ++p) {
      const VecF k0 = VecF::load_aligned(panel + 8 * p), k1 = VecF::load_aligned(panel + 8 * p + kLanes);
      for (int r = 0; r < R; ++r) {
        acc[r][2 * p] += b[r] * k0;
        acc[r][2 * p + 1] += b[r] * k1;
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < 2 * P; ++x) acc[r][x].store_aligned(s + r * kS + kLanes * x);
  st.src = src, st.dst = dst, st.groups = groups;
}

// pv_micro on a staged tile (floats), copying one group of the stream per key.
template <int R, int L, class Ld>
inline void pv_micro_streamed(const float* p, const float* v, int32_t dh8, int32_t nk, float* o, StageStream<Ld>& st, const Ld& ld) {
  const typename Ld::Elem* src = st.src;
  float* dst = st.dst;
  int32_t groups = st.groups;
  VecF acc[R][2 * L];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < 2 * L; ++x) acc[r][x] = VecF::load_aligned(o + r * dh8 + kLanes * x);
  for (int32_t j = 0; j < nk; ++j, ++p, v += dh8) {
    stream_group(src, dst, groups, ld);
    VecF b[R];
    for (int r = 0; r < R; ++r) b[r] = VecF(p[r * kS]);
    for (int l = 0; l < L; ++l) {
      const VecF v0 = VecF::load_aligned(v + 8 * l), v1 = VecF::load_aligned(v + 8 * l + kLanes);
      for (int r = 0; r < R; ++r) {
        acc[r][2 * l] += b[r] * v0;
        acc[r][2 * l + 1] += b[r] * v1;
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < 2 * L; ++x) acc[r][x].store_aligned(o + r * dh8 + kLanes * x);
  st.src = src, st.dst = dst, st.groups = groups;
}

template <int R, class Ld>
inline void qk_panel_streamed(const float* qpanel, const float* panel, int32_t dh, float* s, StageStream<Ld>& st, const Ld& ld) {
  constexpr int P = groups_for_rows<R>();
  for (int32_t c = 0; c < kP; c += 8 * P) qk_micro_streamed<R, P>(qpanel, panel + c, dh, s + c, st, ld);
}

template <int R, class Ld>
inline void pv_tile_streamed(const float* p, const float* v, int32_t dh8, int32_t nk, float* o, StageStream<Ld>& st, const Ld& ld) {
  static_assert(R >= 3, "run_grouped takes items of 3 or 4 rows (run())");
  constexpr int L = groups_for_rows<R>();
  int32_t c = 0;
  for (; c + 8 * L <= dh8; c += 8 * L) pv_micro_streamed<R, L>(p, v + c, dh8, nk, o + c, st, ld);
  for (; c < dh8; c += 8) pv_micro_streamed<R, 1>(p, v + c, dh8, nk, o + c, st, ld);
}

// Out of line (as qk_chunk and pv_chunk come out): inlined into run, their loops ran about 2x slower.
// Chunks of 3 or 4 rows only: run() sends no other item here.
template <class Ld>
__attribute__((noinline)) void qk_chunk_streamed(int32_t rows, const float* qpanel, const float* panel, int32_t dh, float* s, StageStream<Ld>& st,
                              const Ld& ld) {
  switch (rows) {
    case 3: qk_panel_streamed<3>(qpanel, panel, dh, s, st, ld); break;
    default: qk_panel_streamed<4>(qpanel, panel, dh, s, st, ld); break;
  }
}

template <class Ld>
__attribute__((noinline)) void pv_chunk_streamed(int32_t rows, const float* p, const float* v, int32_t dh8, int32_t nk, float* o, StageStream<Ld>& st,
                              const Ld& ld) {
  switch (rows) {
    case 3: pv_tile_streamed<3>(p, v, dh8, nk, o, st, ld); break;
    default: pv_tile_streamed<4>(p, v, dh8, nk, o, st, ld); break;
  }
}

// The V tile [t0, end of its panel) of the block.
struct ValueTile {
  int32_t t0 = 0, nk = 0;
};
inline ValueTile value_tile(const DecodeBlock& blk, int32_t t0) {
  return ValueTile{t0, std::min(blk.key_end, (t0 / kP + 1) * kP) - t0};
}

template <class Ld>
StageStream<Ld> tile_stream(const DecodeBlock& blk, const ValueTile& tile, float* stage) {
  const auto* v = static_cast<const typename Ld::Elem*>(blk.value_rows) + int64_t{tile.t0} * blk.dh8;
  return StageStream<Ld>{v, stage, tile.nk * blk.dh8 / 8};
}

// Phase 2 of block_scores, staged and pipelined. stream_first_tile: the last panel streams V tile 0 into
// the other stage buffer. Returns the stage buffer index that holds (or is free for) V tile 0.
template <class Ld>
MHA_PHASE int grouped_scores(const DecodeBlock& blk, int32_t base, const float* qp, float* s, float* const stages[2], const Ld& ld,
                             bool stream_first_tile) {
  using Elem = typename Ld::Elem;
  const int32_t dh = blk.head_dim;
  const int32_t panels = (blk.key_end - base + kP - 1) / kP;
  const int32_t chunks = chunk_count(blk);
  const int32_t panel_groups = dh * kP / 8;
  const Elem* panel = static_cast<const Elem*>(blk.key_panels) + int64_t{base / kP} * dh * kP;
  StageStream<Ld> first{panel, stages[0], panel_groups};
  stream_drain(first, ld);
  for (int32_t pi = 0; pi < panels; ++pi) {
    const float* current = stages[pi & 1];
    float* next = stages[(pi + 1) & 1];
    StageStream<Ld> st;
    if (pi + 1 < panels) {
      st = StageStream<Ld>{panel + int64_t{pi + 1} * dh * kP, next, panel_groups};
    } else if (stream_first_tile) {
      st = tile_stream<Ld>(blk, value_tile(blk, blk.key_begin), next);
    }
    float* s_panel = s + pi * kP;
    for (int32_t c = 0; c < chunks; ++c)
      qk_chunk_streamed(chunk_rows(blk, c), qp + c * dh * kChunk, current, dh, s_panel + c * kChunk * kS, st, ld);
    stream_drain(st, ld);
  }
  return panels & 1;
}

// Phase 4 of block_values, staged and pipelined: tile i is computed from stages[(first + i) & 1] while
// tile i + 1 streams into the other. first_staged: V tile 0 is already there.
template <class Ld>
MHA_PHASE void grouped_values(const DecodeBlock& blk, int32_t base, const float* s, float* const stages[2], int first, bool first_staged,
                              const Ld& ld) {
  const int32_t dh8 = blk.dh8;
  const int32_t chunks = chunk_count(blk);
  std::fill(blk.o, blk.o + int64_t{blk.rows} * dh8, 0.0f);
  ValueTile tile = value_tile(blk, blk.key_begin);
  if (!first_staged) {
    StageStream<Ld> st = tile_stream<Ld>(blk, tile, stages[first]);
    stream_drain(st, ld);
  }
  for (int32_t i = first; tile.t0 < blk.key_end; ++i) {
    const float* current = stages[i & 1];
    const ValueTile following = value_tile(blk, tile.t0 + tile.nk);
    StageStream<Ld> st;
    if (following.t0 < blk.key_end) st = tile_stream<Ld>(blk, following, stages[(i + 1) & 1]);
    const float* p = s + (tile.t0 - base);
    for (int32_t c = 0; c < chunks; ++c)
      pv_chunk_streamed(chunk_rows(blk, c), p + c * kChunk * kS, current, dh8, tile.nk, blk.o + c * kChunk * dh8, st, ld);
    stream_drain(st, ld);
    tile = following;
  }
}

// The four phases for items of 3 or more rows; Ld reads the cache (true values: staged tiles hold floats).
template <class Ld>
void run_grouped(const DecodeBlock& blk, float* scratch) {
  const Layout lay = make_layout(blk.head_dim);
  const int32_t base = blk.key_begin / kP * kP;
  const Ld ld;
  float* const stages[2] = {scratch + lay.k_stage, scratch + lay.v_stage};
  int first = 0;
  bool first_staged = false;
  if (MHA_RUN_PHASE(1)) pack_q(blk, 1.0f, scratch + lay.q);
  if (MHA_RUN_PHASE(2)) {
    first_staged = MHA_RUN_PHASE(8);
    first = grouped_scores(blk, base, scratch + lay.q, scratch + lay.s, stages, ld, first_staged);
  }
  if (MHA_RUN_PHASE(4)) {
    block_softmax(blk, base, 1.0f, scratch + lay.s);
  } else {
    std::fill(blk.m, blk.m + blk.rows, 0.0f), std::fill(blk.l, blk.l + blk.rows, 1.0f);  // a finite partial
  }
  if (MHA_RUN_PHASE(8)) {
    grouped_values(blk, base, scratch + lay.s, stages, first, first_staged, ld);
  } else {
    std::fill(blk.o, blk.o + int64_t{blk.rows} * blk.dh8, 0.0f);
  }
}

