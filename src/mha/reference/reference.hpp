// The naive scalar reference: the semantic spec of this library, written for clarity, not speed.
// It follows docs/spec.md step by step and accumulates in double, so it is also the accuracy yardstick
// every kernel variant is tested against. Each head is read in place from the (B, S, D) layout: head h
// of a row is the column slice [h*Dh, (h+1)*Dh). Keys are visible by src/mha/core/visibility.hpp.
//
// It allocates nothing per row: a row streams over its keys three times (row max; softmax sum and
// weighted values; weights when asked) with Dh doubles of caller-provided scratch, so a kernel can hand
// it rows from inside a no-exceptions build without an allocation that could abort.
#pragma once

#include "mha/core/shape.hpp"
#include "mha/core/visibility.hpp"

namespace mha {

// Keys and values that are not float rows (a KV cache's panels of stored elements): element d of key j and
// of value j of the row's KV head, exactly as stored. The decode driver's exact rows read a cache so.
struct KeyValueReader {
  const void* source = nullptr;
  float (*key)(const void* source, int32_t j, int32_t d) = nullptr;
  float (*value)(const void* source, int32_t j, int32_t d) = nullptr;
};

// One query row i of one head h, as the reference reads it.
struct ReferenceRow {
  const float* q_row = nullptr;   // (Dh) of head h
  const float* k_rows = nullptr;  // T rows of Dh floats (KV head g = h / (H / Hkv)), k_row_stride apart
  const float* v_rows = nullptr;  // T rows of Dv floats of KV head g, v_row_stride apart; may be null without out_row
  int64_t k_row_stride = 0;
  int64_t v_row_stride = 0;
  int32_t head_dim = 0;   // Dh
  int32_t value_dim = 0;  // Dv
  float scale = 0.0f;
  KeyVisibility visibility;  // of the row's batch item
  int32_t query = 0;         // i (its position is visibility.query_offset + i)
  float softcap = 0.0f;      // 0 = none
  bool alibi = false;
  float alibi_slope = 0.0f;         // slope[h]
  const float* bias_row = nullptr;  // bias[b, h, i, 0..T), or nullptr
  EmptyRows empty_rows = EmptyRows::kNaN;
  bool has_sink = false;
  float sink = 0.0f;  // sinks[h]: a logit in the softmax's denominator without a value row
  RotaryTables rope;  // q_row rotates at position query_offset + query, key j at j
  // With k_rows null, keys and values come through the reader (rope off: such keys are stored rotated, and
  // q_row is given rotated).
  KeyValueReader reader;
};

// Doubles of scratch reference_attention_row needs: Dv accumulators, and Dh for the rotated q with rope.
inline size_t reference_scratch_doubles(int32_t head_dim, int32_t value_dim, bool rope) {
  return static_cast<size_t>(value_dim) + (rope ? static_cast<size_t>(head_dim) : 0);
}

// exp(x) in double, within an ulp of std::exp, for the double-precision paths (this reference, the decode's
// exact rows): unlike std::exp it brings no table into the wasm modules (reference.cpp says how).
double exp_without_table(double x);

// Scaled dot-product attention of ONE head for ONE query row, the building block of everything below,
// in the order of docs/spec.md 2.4-2.5 and 4.4-4.5: scores of the visible keys (rope, softcap, ALiBi,
// bias), softmax (with the row's sink in its denominator), sum.
//   out_row (Dv), optional: softmax_j(scores) @ v over the visible keys;
//   weights_row (T), optional: the softmax probabilities (0 for hidden keys);
//   lse, optional: log-sum-exp of the scores and the sink (natural log; -inf for an empty row);
//   scratch: reference_scratch_doubles(Dh, Dv, rope) doubles (without out_row and rope: may be null).
// An empty row (no visible key, or every score -inf) gives NaN (or 0 with EmptyRows::kZero) in out_row
// and weights_row, and 0 whatever empty_rows says when the row has a sink; a NaN score makes the whole
// row NaN.
void reference_attention_row(const ReferenceRow& row, double* scratch, float* out_row, float* weights_row, float* lse);

// One row of scores at a stage before the softmax (docs/spec.md 4.3): kScaled and kSoftcapped for every
// key, kBiased for the visible keys and -inf for the hidden ones. scratch as for reference_attention_row.
void reference_scores_row(const ReferenceRow& row, ScoreStage stage, double* scratch, float* scores_row);

// One query row of one head, out[b, i, h*Dv:(h+1)*Dv] (and lse[b, h, i] if args.lse), computed by the
// reference with reference_scratch_doubles(Dh, Dv, rope) doubles of scratch in acc. The kernels hand it every row whose
// float32 result is not finite, so non-finite inputs, empty rows and float32 overflow (of the scaled logits or of the
// running sum of weighted values) get exactly the reference's answer.
void reference_attention_query(const AttentionArgs& args, int32_t batch, int32_t head, int32_t query, double* acc);

// Multi-head attention: q (B,S,D), k (B,T,Hkv*Dh), v (B,T,Hkv*Dv) -> out (B,S,H*Dv), lse (B,H,S) if asked.
// See AttentionArgs for the semantics. kOutOfMemory if its scratch cannot be allocated.
Status reference_attention(const AttentionArgs& args);

// The scores at `stage` of every head (the softmax weights by default): (B,H,S,T), dense. args.out,
// args.v and args.lse are not used (may be null).
Status reference_attention_weights(const AttentionArgs& args, float* weights, ScoreStage stage = ScoreStage::kSoftmax);

}  // namespace mha
