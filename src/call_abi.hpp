// The call structs of the direct exports (src/bindings.cpp), each from ONE list of its fields: the list
// generates the struct, its table of {name, offsetof} (which attentionCallLayout() and
// kvCacheAttendCallLayout() hand to web/src, so no offset is copied by hand) and, through
// scripts/gen-abi.mjs, the slot object literals of web/src/abi-fields.generated.ts. Every field is 4
// bytes (wasm32 addresses, int32 dims and flags, float32 scale and softcap).
//
// A list entry is X(type, name, "what it holds"): the name is the C++ member and the JS key; the text
// becomes the member's comment in the generated TypeScript. scripts/gen-abi.mjs reads this file as text:
// keep one X(...) per line, the text a plain string literal. No Emscripten includes: plain C++17.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

// The options of an attention call (mha::AttentionOptions, src/mha/core/shape.hpp), ONE list that both
// call structs carry and src/bindings.cpp reads with one function. A list may name another list,
// MHA_..._FIELDS(X), on a line of its own (scripts/gen-abi.mjs expands it too).
#define MHA_OPTION_FIELDS(X)                                                          \
  X(int32_t, causal, "0 / 1 (cache.attend's default is 1)")                           \
  X(int32_t, window_left, "-1 = unbounded (Infinity)")                                \
  X(int32_t, window_right, "-1 = unbounded (Infinity)")                               \
  X(int32_t, empty_rows, "0 = 'nan', 1 = 'zero'")                                     \
  X(float, scale, "resolved by the caller (1/sqrt(Dh) default)")                      \
  X(float, softcap, "0 = none")                                                       \
  X(uint32_t, alibi_slopes, "0 = none; float32 (H)")                                  \
  X(uint32_t, sinks, "0 = none; float32 (H)")                                         \
  X(uint32_t, rope_cos, "0 = no rope; float32 (rope_positions, rope_rotary_dim / 2)") \
  X(uint32_t, rope_sin, "0 = no rope; float32 (rope_positions, rope_rotary_dim / 2)") \
  X(int32_t, rope_positions, "P, the rows of the rope tables (0 without rope)")       \
  X(int32_t, rope_rotary_dim, "even, in [2, Dh] (0 without rope)")                    \
  X(int32_t, rope_interleaved, "0 = rotate_half pairs, 1 = interleaved pairs")        \
  X(int32_t, rope_first_position, "the position of the tables' first row (a cache attend: min of the old lengths)")

// One attention call as web/src writes it into the instance's staging arena; mha_attention,
// mha_attention_begin and mha_attention_weights read it, so a new option adds a field instead of changing
// every call site. The "none" value of each optional field is what a v1 call writes.
#define MHA_ATTENTION_CALL_FIELDS(X)                                                                             \
  X(uint32_t, q, "heap address of q (B, S, D), float32")                                                         \
  X(uint32_t, k, "heap address of k (B, T, Hkv*Dh), float32")                                                    \
  X(uint32_t, v, "heap address of v (B, T, Hkv*Dv), float32; 0 for attention_weights")                           \
  X(uint32_t, out, "heap address of out (B, S, H*Dv); attention_weights: the (B, H, S, T) scores of `stage`")    \
  X(uint32_t, mask, "0 = none; uint8 (B, S, T), nonzero = may attend")                                           \
  X(uint32_t, bias, "0 = none; float32 [bias_batch, bias_heads, S, T]")                                          \
  X(uint32_t, kv_lengths, "0 = none; int32 (B)")                                                                 \
  X(uint32_t, lse, "0 = none; float32 (B, H, S) output (attention only)")                                        \
  X(int32_t, batch, "B")                                                                                         \
  X(int32_t, seq_len, "S")                                                                                       \
  X(int32_t, kv_seq_len, "T")                                                                                    \
  X(int32_t, d_model, "D")                                                                                       \
  X(int32_t, num_heads, "H")                                                                                     \
  X(int32_t, num_kv_heads, "Hkv (none: Hkv = H)")                                                                \
  X(int32_t, v_head_dim, "Dv; 0 = Dh")                                                                           \
  X(int32_t, query_offset, ">= 0")                                                                               \
  X(int32_t, bias_batch, "1 or B, a broadcast dim of biasShape; ignored without a bias (the TS layer writes 1)") \
  X(int32_t, bias_heads, "1 or H, a broadcast dim of biasShape; ignored without a bias (the TS layer writes 1)") \
  MHA_OPTION_FIELDS(X)                                                                                           \
  X(int32_t, stage, "attention_weights only: 0 scaled, 1 softcapped, 2 biased, 3 softmax")

// One mha_kv_cache_attend call, written by web/src into the instance's scratch arena.
#define MHA_CACHE_ATTEND_CALL_FIELDS(X)                                                \
  X(uint32_t, cache, "id from mha_kv_cache_create")                                    \
  X(uint32_t, q, "heap address of q (B, n, H*Dh), dense float32")                      \
  X(uint32_t, k, "heap address of k (B, n, Hkv*Dh), dense float32")                    \
  X(uint32_t, v, "heap address of v (B, n, Hkv*Dv), dense float32")                    \
  X(uint32_t, out, "heap address of out (B, n, H*Dv), dense float32")                  \
  X(uint32_t, lse, "0 = none; float32 (B, H, n) output")                               \
  X(int32_t, new_tokens, "n >= 1")                                                     \
  X(int32_t, num_heads, "H, a multiple of the cache's Hkv")                            \
  X(uint32_t, new_token_counts, "0 = n for every sequence; int32 (B), each in [0, n]") \
  X(uint32_t, prefix, "0 = none; id of a batch-1 cache whose tokens come first")       \
  MHA_OPTION_FIELDS(X)

#define MHA_ABI_MEMBER(type, name, doc) type name;
#define MHA_ABI_FOUR_BYTES(type, name, doc) static_assert(sizeof(type) == 4, "call struct fields are 4 bytes: " #name);

struct AttentionCallAbi {
  MHA_ATTENTION_CALL_FIELDS(MHA_ABI_MEMBER)
};
struct CacheAttendCallAbi {
  MHA_CACHE_ATTEND_CALL_FIELDS(MHA_ABI_MEMBER)
};
MHA_ATTENTION_CALL_FIELDS(MHA_ABI_FOUR_BYTES)
MHA_CACHE_ATTEND_CALL_FIELDS(MHA_ABI_FOUR_BYTES)
static_assert(std::is_standard_layout_v<AttentionCallAbi>, "offsetof needs a standard-layout struct");
static_assert(std::is_standard_layout_v<CacheAttendCallAbi>, "offsetof needs a standard-layout struct");

// A field's name and byte offset, as the layout functions of src/bindings.cpp hand them to web/src.
struct AbiField {
  const char* name;
  size_t offset;
};

#define MHA_ABI_ATTENTION_FIELD(type, name, doc) {#name, offsetof(AttentionCallAbi, name)},
#define MHA_ABI_CACHE_ATTEND_FIELD(type, name, doc) {#name, offsetof(CacheAttendCallAbi, name)},
constexpr AbiField kAttentionCallFields[] = {MHA_ATTENTION_CALL_FIELDS(MHA_ABI_ATTENTION_FIELD)};
constexpr AbiField kCacheAttendCallFields[] = {MHA_CACHE_ATTEND_CALL_FIELDS(MHA_ABI_CACHE_ATTEND_FIELD)};
#undef MHA_ABI_ATTENTION_FIELD
#undef MHA_ABI_CACHE_ATTEND_FIELD
#undef MHA_ABI_FOUR_BYTES
#undef MHA_ABI_MEMBER

static_assert(sizeof(kAttentionCallFields) / sizeof(AbiField) * 4 == sizeof(AttentionCallAbi),
              "every 4-byte field of AttentionCallAbi is in kAttentionCallFields");
static_assert(sizeof(kCacheAttendCallFields) / sizeof(AbiField) * 4 == sizeof(CacheAttendCallAbi),
              "every 4-byte field of CacheAttendCallAbi is in kCacheAttendCallFields");
