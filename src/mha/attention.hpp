// The fast attention kernel (xsimd, WebAssembly SIMD128 when compiled with Emscripten).
// Same semantics as reference_attention (src/mha/reference.hpp); tested against it.
//
// Work is cut into independent units of (batch b, head h, query rows [q_begin, q_end)). A unit reads
// its head of q/k/v in place from the strided (B,S,D)/(B,T,D) tensors and writes its (rows, Dh) slice
// of the merged (B,S,D) output, so units can run on any thread, in any order, with the same result.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mha/shape.hpp"
#include "mha/workspace.hpp"

namespace mha {

struct WorkUnit {
  int32_t batch = 0;
  int32_t head = 0;
  int32_t q_begin = 0;  // first query row
  int32_t q_end = 0;    // one past the last query row
};

// Where one unit's head lives: q/out at head h of batch b, k/v at its key/value head (the one place that
// maps a query head to a key/value head: grouped-query attention would divide there), and the mask rows
// of batch b (nullptr without a mask). Rows are still args' row_stride apart.
struct UnitViews {
  const float* q;   // (S rows, Dh) of head h
  const float* k;   // (T rows, Dh) of its key/value head
  const float* v;   // (T rows, Dh) of its key/value head
  float* out;       // (S rows, Dh) of head h
  const uint8_t* mask;  // (S, T) of batch b, or nullptr
};
UnitViews unit_views(const AttentionArgs& args, const WorkUnit& unit);

// Query rows per work unit (the last unit of a head may have fewer).
int32_t attention_rows_per_unit(const AttentionShape& shape);

// Number of units of a call: B * H * ceil(S / rows_per_unit).
int64_t attention_unit_count(const AttentionShape& shape);

// Unit `index` in [0, attention_unit_count): batch-major, then head, then query block.
WorkUnit attention_unit(const AttentionShape& shape, int64_t index);

// Floats of scratch one worker needs to run any unit of this shape. Independent of S and T beyond
// a fixed tile, so long sequences need no more memory per worker than short ones.
size_t attention_scratch_floats(const AttentionShape& shape);

// Runs one unit. args must have passed validate_args; scratch holds attention_scratch_floats floats,
// 64-byte aligned, and is private to the calling thread.
//
// out may be q itself (the same data and strides; any other overlap is undefined): a unit reads the
// rows of its head of q before it writes the same rows of its head of out, and no other unit reads them.
// This lets a caller that stages q anyway take the result from there (web/src/index.ts does).
void attention_run_unit(const AttentionArgs& args, const WorkUnit& unit, float* scratch);

// All units on the calling thread, with the scratch grown in `workspace` as needed.
Status attention(const AttentionArgs& args, Workspace& workspace);

}  // namespace mha
