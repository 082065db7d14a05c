// The naive scalar reference: the semantic spec of this library, written for clarity, not speed.
// It follows docs/spec.md step by step and accumulates in double, so it is
// also the accuracy yardstick every fast kernel is tested against. Each head is read in place from
// the (B, S, D) layout: head h of a row is the column slice [h*Dh, (h+1)*Dh).
#pragma once

#include "mha/shape.hpp"

namespace mha {

// Scaled dot-product attention of ONE head for ONE query row, the building block of everything below.
//   q_row (Dh); k_rows, v_rows: T rows of Dh floats each, successive rows k_row_stride / v_row_stride
//   apart (D for a head read in place from a dense (B, T, D) tensor).
//   visible(j) says whether key j may be attended (mask AND causal).
//   out_row (Dh); weights_row (T), optional: the softmax probabilities.
// With no visible key, out_row and weights_row are all NaN (softmax of an all -inf row, as PyTorch).
void reference_attention_row(const float* q_row, const float* k_rows, const float* v_rows,
                             int64_t k_row_stride, int64_t v_row_stride, int32_t kv_seq_len, int32_t head_dim, float scale,
                             const uint8_t* mask_row, bool causal, int32_t query_index, float* out_row,
                             float* weights_row);

// One query row of one head, out[b, i, h*Dh:(h+1)*Dh], computed by the reference. The fast kernels hand
// it every row whose float32 result is not finite, so non-finite inputs and float32 overflow (of the
// scaled logits or of the running sum of weighted values) get exactly the reference's answer.
void reference_attention_query(const AttentionArgs& args, int32_t batch, int32_t head, int32_t query);

// Multi-head attention: q (B,S,D), k/v (B,T,D) -> out (B,S,D). See AttentionArgs for the semantics.
Status reference_attention(const AttentionArgs& args);

// The softmax weights of every head: weights (B,H,S,T), dense. args.out is not used (may be null).
Status reference_attention_weights(const AttentionArgs& args, float* weights);

}  // namespace mha
