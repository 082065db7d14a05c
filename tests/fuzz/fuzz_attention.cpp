// Differential fuzzing of every kernel variant of the build (mha::kernel_variants(): simd128 and scalar)
// against the double-precision reference (mha::reference_attention), under ASan + UBSan. Built by the CMake option
// MHA_FUZZ (clang only); run with `npm run fuzz` (scripts/fuzz.sh) or the short fixed-seed slice in scripts/test.sh.
//
// Input layout (tests/fuzz/README.md describes it for corpus authors): a header of shape/config bytes,
// an 8-byte seed for the bulk values, then any number of 4-byte "injections" that put special values
// (NaN, +-inf, denormals, +-0, FLT_MAX, 1e30, ...) at chosen positions of q, k, v or flip mask bytes.
// An input that ends with "OPTS" and 12 option bytes also sets the options of docs/spec.md Part 2
// (grouped-query heads, query offset, kvLengths, window, softcap, ALiBi, bias, emptyRows, lse); inputs
// without that tail (every v1 reproducer of the corpus) decode as before. A "V3OP" tail of 4 bytes just
// before it (or at the end) sets the options of Part 4: Dv of its own, sinks and rope.
//
// What one input checks, for each kernel variant:
//   1. no crash, no ASan/UBSan report; inputs are allocated with their exact extent and the gaps of
//      strided buffers hold NaN, so an out-of-bounds or gap read shows up;
//   2. neither kernel writes outside the output's (B, S, H*Dv) elements (gap sentinels unchanged);
//   3. the kernel's scratch is poisoned with NaN before the call (reads of stale scratch show);
//   4. running the work units in reverse order gives a bit-identical output;
//   5. merge_heads(split_heads(q)) == q bit for bit;
//   6. per output element, fast vs reference:
//        - same class: NaN, +inf, -inf or finite (so NaN positions and infinities are identical);
//        - both finite: |fast - ref| <= tol, the bound derived in fuzz_compare.hpp; empty rows exactly;
//      and per lse element: same class, -inf exactly, finite within E + 2 gamma_T + 8u max(1, |lse|);
//      except in the "float32 range" cases listed under `Domain` there, which are documented limits of a
//      float32 kernel (README, Guarantees) and are counted, not failed.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "mha/kernels/kernel.hpp"
#include "mha/core/heads.hpp"
#include "mha/reference/reference.hpp"
#include "mha/core/shape.hpp"
#include "mha/core/visibility.hpp"
#include "mha/core/workspace.hpp"

#include "fuzz_compare.hpp"

namespace {

using namespace fuzz;
mha::Workspace g_workspace;  // reused across inputs, as the wasm binding reuses its scratch

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const FuzzOptions options = split_options(data, size);
  const V3Options v3 = split_v3(data, size);
  const uint8_t* o = options.bytes;  // all 0 without an options tail
  Reader in{data, size};
  const uint8_t h0 = in.u8(), h1 = in.u8(), h2 = in.u8(), h3 = in.u8(), h4 = in.u8(), flags = in.u8(), layout = in.u8(),
                mask_kind = in.u8(), value_kinds = in.u8(), v_kind = in.u8(), scale_kind = in.u8();
  const uint64_t seed = in.u64();

  mha::AttentionShape shape;
  shape.batch = 1 + h0 % 3;
  shape.seq_len = pick_len(h1);
  shape.kv_seq_len = (flags & 0x40) ? shape.seq_len : pick_len(h2);
  shape.num_kv_heads = 1 + h3 % 4;
  shape.num_heads = shape.num_kv_heads * (1 + o[0] % 4);            // grouped-query heads with options
  const int32_t head_dim = (h4 < 200) ? 1 + h4 % 20 : 1 + h4 % 70;  // odd and 1 included
  shape.d_model = head_dim * shape.num_heads;
  shape.v_head_dim = pick_value_dim(v3);
  const int32_t kv_d = head_dim * shape.num_kv_heads;
  const int32_t v_d = shape.value_dim() * shape.num_kv_heads, out_d = shape.value_dim() * shape.num_heads;
  // Keep one input cheap (the reference is O(B H S T Dh)): shrink T, then S.
  while (int64_t{shape.batch} * shape.seq_len * shape.kv_seq_len * (shape.d_model + out_d) > 300000) {
    if (shape.kv_seq_len > 1)
      shape.kv_seq_len = (shape.kv_seq_len + 1) / 2;
    else
      shape.seq_len = (shape.seq_len + 1) / 2;
  }
  const int32_t B = shape.batch, S = shape.seq_len, T = shape.kv_seq_len, D = shape.d_model, Dh = head_dim;
  const bool causal = flags & 1;
  const bool with_mask = flags & 2;
  const bool strided = flags & 4;

  // Offsets (misalignment by whole floats) and gaps: layout bits per tensor.
  auto make = [&](int32_t rows, int which) {
    const int bits = (layout >> (2 * which)) & 3;
    const int32_t off = bits & 1 ? 1 + which % 3 : 0;
    const int32_t row_pad = strided ? (bits & 2 ? 1 + which : 0) : 0;
    const int32_t batch_pad = strided ? which : 0;
    return Strided(B, rows, which == 1 ? kv_d : which == 2 ? v_d : which == 3 ? out_d : D, off, row_pad, batch_pad);
  };
  Strided q = make(S, 0), k = make(T, 1), v = make(T, 2);

  std::mt19937_64 rng(seed);
  auto cells_of = [](Strided& t) {
    std::vector<float*> cells;
    for (int32_t b = 0; b < t.batch; ++b)
      for (int32_t r = 0; r < t.rows; ++r)
        for (int32_t c = 0; c < t.d; ++c) cells.push_back(&t.at(b, r, c));
    return cells;
  };
  std::vector<float*> q_cells = cells_of(q), k_cells = cells_of(k), v_cells = cells_of(v);
  fill_values(q_cells, value_kinds & 7, rng);
  fill_values(k_cells, value_kinds >> 3 & 7, rng);
  fill_values(v_cells, v_kind, rng);
  if (value_kinds & 0x40) {  // k = q (self-attention on one tensor) when the shapes agree
    if (S == T)
      for (size_t i = 0; i < k_cells.size(); ++i) *k_cells[i] = *q_cells[i];
  }

  std::vector<uint8_t> mask;
  if (with_mask) {
    mask.resize(size_t(B) * S * T);
    const int density = mask_kind % 5;  // all on, all off, 1/2, 7/8, 1/8
    for (uint8_t& m : mask) {
      const uint32_t r = uint32_t(rng() & 7);
      m = density == 0 ? 1 : density == 1 ? 0 : density == 2 ? (r & 1) : density == 3 ? (r != 0) : (r == 0);
      if (m && (mask_kind & 0x80)) m = uint8_t(1 + rng() % 255);  // any nonzero byte means attend
    }
  }
  const float scale = pick_scale(scale_kind, in, Dh);

  // Injections: 4 bytes each, (target, index lo, index hi, kind).
  while (in.remaining_bytes() >= 4) {
    const uint8_t target = in.u8();
    const uint16_t index = in.u16();
    const uint8_t kind = in.u8();
    switch (target % 4) {
      case 0: *q_cells[index % q_cells.size()] = special_value(kind); break;
      case 1: *k_cells[index % k_cells.size()] = special_value(kind); break;
      case 2: *v_cells[index % v_cells.size()] = special_value(kind); break;
      default:
        if (!mask.empty()) mask[index % mask.size()] ^= 1;
        break;
    }
  }

  mha::AttentionArgs args;
  args.shape = shape;
  args.q = q.view<const float>();
  args.k = k.view<const float>();
  args.v = v.view<const float>();
  args.mask = mask.empty() ? nullptr : mask.data();
  args.causal = causal;
  args.scale = scale;

  // The options tail (its own PRNG stream, so the values above do not depend on it).
  OptionBuffers option_buffers;
  if (options.present) apply_options(options, seed, args, option_buffers);
  apply_v3(v3, seed, args, option_buffers);
  const bool want_lse = options.present && (o[10] & 2);
  std::vector<float> ref_lse;
  if (want_lse) {
    ref_lse.assign(size_t(B) * shape.num_heads * S, sentinel());
    args.lse = ref_lse.data();
  }

  // Reference, into a strided output too.
  Strided ref = make(S, 3);
  args.out = ref.view<float>();
  if (mha::reference_attention(args) != mha::Status::kOk) fail("reference rejected a valid call");
  for (float x : ref_lse) {
    if (is_sentinel(x)) fail("the reference left an lse element unwritten");
  }
  for (size_t i = 0; i < ref.storage.size(); ++i) {
    if (!ref.is_element(i) && !is_sentinel(ref.storage[i])) fail("reference wrote outside the output elements");
  }

  // split/merge round trip on q's values (dense copies).
  {
    std::vector<float> x(q_cells.size()), xh(x.size()), back(x.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = *q_cells[i];
    if (mha::split_heads(x.data(), B, S, D, shape.num_heads, xh.data()) != mha::Status::kOk ||
        mha::merge_heads(xh.data(), B, S, D, shape.num_heads, back.data()) != mha::Status::kOk) {
      fail("split/merge rejected a valid call");
    }
    if (std::memcmp(x.data(), back.data(), x.size() * sizeof(float)) != 0) fail("merge(split(x)) != x");
  }

  ++g_counters.inputs;
  if (std::getenv("MHA_FUZZ_VERBOSE")) {
    std::fprintf(stderr,
                 "input: B=%d S=%d T=%d D=%d H=%d Hkv=%d causal=%d mask=%d strided=%d scale=%g; offset=%d kvLengths=%d "
                 "window=[%d, %d] softcap=%g alibi=%d bias=%d emptyRows=%d lse=%d Dv=%d sinks=%d rope=%d\n",
                 B, S, T, D, shape.num_heads, shape.num_kv_heads, causal, with_mask, strided, double(scale),
                 args.query_offset, int(args.kv_lengths != nullptr), args.window_left, args.window_right,
                 double(args.softcap), int(args.alibi_slopes != nullptr), int(args.bias.data != nullptr),
                 int(args.empty_rows), int(want_lse), shape.value_dim(), int(args.sinks != nullptr),
                 args.rope.rotary_dim);
  }
  std::vector<KernelOutput> outputs;
  for (const mha::KernelVariant* kernel : mha::kernel_variants()) {
    g_kernel_name = kernel->name;
    // The variant, scratch poisoned with NaN first.
    outputs.push_back(KernelOutput{kernel->name, make(S, 3), {}});
    Strided& out = outputs.back().out;
    args.out = out.view<float>();
    if (want_lse) {
      outputs.back().lse.assign(ref_lse.size(), sentinel());
      args.lse = outputs.back().lse.data();
    }
    const mha::KernelPlan plan = kernel->plan(args);
    if (!g_workspace.reserve(plan.scratch.total)) fail("workspace reserve");
    std::fill(g_workspace.data(), g_workspace.data() + g_workspace.capacity(), kNaN);
    if (mha::attention(args, g_workspace, *kernel) != mha::Status::kOk) fail("attention rejected a valid call");
    for (size_t i = 0; i < out.storage.size(); ++i) {
      if (!out.is_element(i) && !is_sentinel(out.storage[i])) fail("attention wrote outside the output elements");
    }
    for (float x : outputs.back().lse) {
      if (is_sentinel(x)) fail("attention left an lse element unwritten");
    }

    // Units in reverse order, fresh NaN-poisoned scratch: bit-identical.
    Strided out2 = make(S, 3);
    mha::AttentionArgs a2 = args;
    a2.out = out2.view<float>();
    std::vector<float> lse2(outputs.back().lse.size());
    a2.lse = want_lse ? lse2.data() : nullptr;
    std::vector<float> scratch(plan.scratch.total + 16, kNaN);
    float* aligned = scratch.data();
    while (reinterpret_cast<uintptr_t>(aligned) % 64 != 0) ++aligned;
    for (int64_t u = plan.unit_count - 1; u >= 0; --u)
      kernel->run_unit(a2, plan, mha::plan_unit(shape, plan, u), aligned);
    if (std::memcmp(out2.storage.data(), out.storage.data(), out.storage.size() * sizeof(float)) != 0 ||
        (want_lse && std::memcmp(lse2.data(), outputs.back().lse.data(), lse2.size() * sizeof(float)) != 0)) {
      fail("units in reverse order differ from attention()");
    }
  }
  compare_with_reference(args, q, k, v, outputs, ref, ref_lse, mask, scale, Dh);
  return 0;
}
