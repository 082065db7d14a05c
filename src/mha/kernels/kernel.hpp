// The kernel interface: what every attention kernel variant implements, the plan a call is cut by, and
// the drivers that run a variant.
//
// A variant is one translation unit with its own namespace and compile flags (mha::simd128 in
// kernel_simd128.cpp, mha::scalar in kernel_scalar.cpp) exporting one KernelVariant; kernel_table.cpp
// lists the variants a build compiled, best first. Adding a variant is one more source file in CMake's
// variant list plus one entry in that table. Every variant has the reference's semantics
// (src/mha/reference/reference.hpp) and is tested against it in the same test binary.
//
// A call is cut into independent work units: (batch b, KV head g, query rows [q_begin, q_end)) covering the
// G = H / Hkv query heads that read KV head g. A unit reads its heads of q/k/v in place from the strided
// (B,S,D)/(B,T,Hkv*Dh)/(B,T,Hkv*Dv) tensors and writes its (rows, Dv) slices of the merged (B,S,H*Dv)
// output, so units can run on any thread, in any order, with the same result. Every kernel computes
// value heads of their own size (Dv), sinks and rope itself: sinks start each row's online softmax, rope
// rotates q and k where they are packed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mha/core/shape.hpp"
#include "mha/core/visibility.hpp"
#include "mha/core/workspace.hpp"

namespace mha {

struct WorkUnit {
  int32_t batch = 0;
  int32_t kv_head = 0;  // the unit covers query heads [kv_head * G, (kv_head + 1) * G)
  int32_t q_begin = 0;  // first query row
  int32_t q_end = 0;    // one past the last query row
};

// Where a unit's buffers live in a worker's scratch: offsets in floats, each 64-byte aligned. A variant
// uses the buffers it needs; the others stay 0. (G*R4 = the unit's rows of all its heads, each head's
// rows rounded up to the micro-kernel's 4.)
struct ScratchLayout {
  size_t q_panels = 0;   // Q rows packed for the micro-kernel (G*R4, Dh); scalar: rotated Q rows (rope only)
  size_t k_tile = 0;     // packed K tile; scalar: the rotated keys of one tile (rope only)
  size_t v_tile = 0;     // packed V tile (Bk, Dv8)
  size_t scores = 0;     // scores / probabilities of one block against one key tile
  size_t out_acc = 0;    // output accumulators O (G*R4, padded Dv)
  size_t row_max = 0;    // running max m per row (G*R4)
  size_t row_sum = 0;    // running sum l per row (G*R4)
  size_t rescale = 0;    // this tile's rescale factor per row (G*R4)
  size_t reference = 0;  // reference_scratch_doubles(Dh, Dv, rope) doubles: for the rows the reference redoes
  size_t total = 0;      // floats of scratch one worker needs
};

// Everything about a call that does not change from one work unit to the next, computed once per call by
// the variant (KernelVariant::plan). Independent of S and T beyond the fixed tiles, so long sequences
// need no more scratch per worker than short ones.
struct KernelPlan {
  int32_t head_dim = 0;           // Dh
  int32_t padded_head_dim = 0;    // Dh rounded up to the micro-kernel's width (sizes the units)
  int32_t value_dim = 0;          // Dv
  int32_t padded_value_dim = 0;   // Dv rounded up to the micro-kernel's width (row length of packed V and O)
  int32_t heads_per_kv_head = 1;  // G = H / Hkv: query head h reads KV head h / G (by stride, never copied)
  int32_t rows_per_unit = 0;      // R: query rows of each head per unit (the last unit may have fewer)
  int32_t rows_per_block = 0;     // Bq: query rows sharing one score tile
  int32_t keys_per_tile = 0;      // Bk: keys per key tile in this call
  int32_t units_per_kv_head = 0;  // ceil(S / R)
  int64_t unit_count = 0;         // B * Hkv * units_per_kv_head
  ScratchLayout scratch;
};

// Fills units_per_kv_head and unit_count from rows_per_unit (every variant's plan ends with it).
void count_units(const AttentionShape& shape, KernelPlan& plan);

// Unit `index` in [0, plan.unit_count): batch-major, then KV head, then query block, so consecutive units
// share a batch item's K/V.
WorkUnit plan_unit(const AttentionShape& shape, const KernelPlan& plan, int64_t index);

// Where one unit's heads live: q/out at the first query head of its group (head i of the group is i*Dh
// further in q, i*Dv in out), k/v at its KV head, and the visibility rule of its batch item. Rows are still args'
// row_stride apart.
struct UnitViews {
  const float* q;  // (S rows, G*Dh)
  const float* k;  // (T rows, Dh) of KV head g
  const float* v;  // (T rows, Dv) of KV head g
  float* out;      // (S rows, G*Dv)
  KeyVisibility visibility;
};
UnitViews unit_views(const AttentionArgs& args, const KernelPlan& plan, const WorkUnit& unit);

struct KernelVariant {
  const char* name;  // "simd128", "scalar"
  // The plan of a call (args must have passed validate_args; their data is not read).
  KernelPlan (*plan)(const AttentionArgs& args);
  // Runs one unit. scratch holds plan.scratch.total floats, 64-byte aligned, private to the calling thread.
  // out may be q itself (the same data and strides; any other overlap is undefined): a unit reads the
  // rows of its heads of q before it writes the same rows of its heads of out, and no other unit reads
  // them. This lets a caller that stages q anyway take the result from there (web/src does).
  void (*run_unit)(const AttentionArgs& args, const KernelPlan& plan, const WorkUnit& unit, float* scratch);
};

// The variants of one kind compiled into this build, best first (kernel_table.cpp): the tiled kernels
// here, the decode kernels in decode.hpp.
template <class Variant>
struct VariantList {
  const Variant* const* items;
  size_t count;
  const Variant* const* begin() const { return items; }
  const Variant* const* end() const { return items + count; }
};
using KernelList = VariantList<KernelVariant>;
KernelList kernel_variants();

// The build's kernel: the first of kernel_variants().
const KernelVariant& default_kernel();

// All units of a call on the calling thread, with the scratch grown in `workspace` as needed
// (kOutOfMemory if it cannot grow).
Status attention(const AttentionArgs& args, Workspace& workspace, const KernelVariant& kernel = default_kernel());

}  // namespace mha
