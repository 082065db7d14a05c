// KVCache::reorder (docs/spec.md 5.4, FlashAttention's cache_batch_idx): beam search keeps the best beams
// each step, some twice. Sequence b's storage is one block per region (its Hkv heads' key panels, value
// rows and, for scaled dtypes, their scales: kv_cache.hpp), so moving a sequence is 2 to 4 copies per head,
// each only as long as its tokens. The order of the copies makes the move in place: a sequence is
// overwritten only once every sequence that takes its old tokens has them; what is left then are cycles
// (b0 <- b1 <- ... <- b0, e.g. a swap), each broken by saving one sequence's tokens to a buffer.
#include <algorithm>
#include <cstring>

#include "mha/cache/kv_cache.hpp"
#include "mha/core/workspace.hpp"

namespace mha {

// Where sequence b's regions start and how far apart its heads are, in bytes; a buffer has the same shape
// with its heads packed. Scales are null for unscaled dtypes.
struct CacheSequenceSpan {
  char* keys = nullptr;
  char* values = nullptr;
  char* key_scales = nullptr;
  char* value_scales = nullptr;
  int64_t key_head = 0, value_head = 0, key_scale_head = 0, value_scale_head = 0;
};

namespace {

// Bytes of one head's slots [0, length) in each region: whole key panels (a panel's tail is the source's
// own, never read past its length), value rows, and their scales.
struct TokenBytes {
  int64_t keys, values, key_scales, value_scales;
};

TokenBytes token_bytes(const KVCacheConfig& c, int32_t length) {
  const int64_t panels = (int64_t{length} + kKeysPerPanel - 1) / kKeysPerPanel;
  const bool scaled = cache_dtype_info(c.dtype).scaled;
  const int64_t value_row = round_up(c.value_dim(), 8);
  return TokenBytes{cache_elements_bytes(c.dtype, panels * c.head_dim * kKeysPerPanel),
                    cache_elements_bytes(c.dtype, int64_t{length} * value_row),
                    scaled ? panels * scale_blocks(c.head_dim) * kKeysPerPanel * 4 : 0,
                    scaled ? int64_t{length} * scale_blocks(c.value_dim()) * 4 : 0};
}

// Copies the first `length` tokens of every head from one span to another (the two never overlap).
void copy_tokens(const KVCacheConfig& c, const CacheSequenceSpan& to, const CacheSequenceSpan& from, int32_t length) {
  const TokenBytes bytes = token_bytes(c, length);
  for (int32_t g = 0; g < c.num_kv_heads; ++g) {
    std::memcpy(to.keys + g * to.key_head, from.keys + g * from.key_head, size_t(bytes.keys));
    std::memcpy(to.values + g * to.value_head, from.values + g * from.value_head, size_t(bytes.values));
    if (from.key_scales == nullptr) continue;
    std::memcpy(to.key_scales + g * to.key_scale_head, from.key_scales + g * from.key_scale_head,
                size_t(bytes.key_scales));
    std::memcpy(to.value_scales + g * to.value_scale_head, from.value_scales + g * from.value_scale_head,
                size_t(bytes.value_scales));
  }
}

// Floats of a buffer of `length` tokens of every head (every region's bytes are a multiple of 4: a panel
// row is 32 elements).
size_t token_floats(const KVCacheConfig& c, int32_t length) {
  const TokenBytes bytes = token_bytes(c, length);
  return size_t(c.num_kv_heads) * size_t(bytes.keys + bytes.values + bytes.key_scales + bytes.value_scales) / 4 + 1;
}

// The buffer at `storage` (token_floats(length) floats) shaped as `length` tokens of every head, packed.
CacheSequenceSpan buffer_span(const KVCacheConfig& c, int32_t length, float* storage) {
  const TokenBytes bytes = token_bytes(c, length);
  CacheSequenceSpan span;
  span.key_head = bytes.keys;
  span.value_head = bytes.values;
  span.key_scale_head = bytes.key_scales;
  span.value_scale_head = bytes.value_scales;
  span.keys = reinterpret_cast<char*>(storage);
  span.values = span.keys + c.num_kv_heads * bytes.keys;
  const bool scaled = cache_dtype_info(c.dtype).scaled;
  span.key_scales = scaled ? span.values + c.num_kv_heads * bytes.values : nullptr;
  span.value_scales = scaled ? span.key_scales + c.num_kv_heads * bytes.key_scales : nullptr;
  return span;
}

// The plan's per-sequence integers, in one allocation made before anything moves (batch of each).
struct ReorderPlan {
  int32_t* readers;      // readers[s]: pending sequences still to take s's old tokens
  int32_t* pending;      // pending[b] != 0: b has yet to be written
  int32_t* ready;        // a stack of pending sequences nobody still reads
  int32_t* old_lengths;  // lengths, special_from and stored before the move
  int32_t* old_special;
  int32_t* old_stored;
  int32_t* old_extent;  // the slots that hold each sequence's tokens (KVCache::slot_extent)
  int32_t ready_count = 0;
};

// How many pending sequences the chains from the ready ones reach, each written once nobody still reads
// it: all of them unless some lie on cycles. Walks copies of readers and ready (in `scratch`, 2 batch).
int32_t chain_length(const int32_t* indices, const ReorderPlan& plan, int32_t batch, int32_t* scratch) {
  int32_t* readers = scratch;
  int32_t* ready = scratch + batch;
  std::memcpy(readers, plan.readers, size_t(batch) * 4);
  std::memcpy(ready, plan.ready, size_t(plan.ready_count) * 4);
  int32_t count = plan.ready_count, reached = 0;
  while (count > 0) {
    const int32_t source = indices[ready[--count]];
    ++reached;
    if (--readers[source] == 0 && plan.pending[source] != 0) ready[count++] = source;
  }
  return reached;
}

}  // namespace

CacheSequenceSpan KVCache::sequence_span(int32_t b) const {
  CacheSequenceSpan span;
  span.key_head = cache_elements_bytes(config_.dtype, panels_ * panel_elements());
  span.value_head = cache_elements_bytes(config_.dtype, int64_t{config_.capacity} * value_row_elements());
  span.keys = static_cast<char*>(keys_) + head_index(b, 0) * span.key_head;
  span.values = static_cast<char*>(values_) + head_index(b, 0) * span.value_head;
  if (key_scales_ != nullptr) {
    span.key_scale_head = panels_ * key_scale_blocks() * kKeysPerPanel * 4;
    span.value_scale_head = int64_t{config_.capacity} * value_scale_blocks() * 4;
    span.key_scales = reinterpret_cast<char*>(key_scales_) + head_index(b, 0) * span.key_scale_head;
    span.value_scales = reinterpret_cast<char*>(value_scales_) + head_index(b, 0) * span.value_scale_head;
  }
  return span;
}

Status KVCache::reorder(const int32_t* indices) {
  if (indices == nullptr) return Status::kNullPointer;
  const int32_t batch = config_.batch;
  for (int32_t b = 0; b < batch; ++b)
    if (indices[b] < 0 || indices[b] >= batch) return Status::kCacheBadIndices;
  // ---- plan: pending = the sequences that change; readers[s] = those of them still to take s's tokens.
  // One allocation holds the plan's integers (a float Workspace used as int32 storage, same size).
  Workspace integers;
  if (!integers.reserve(size_t(batch) * 9)) return Status::kOutOfMemory;
  int32_t* const ints = reinterpret_cast<int32_t*>(integers.data());
  std::memset(ints, 0, size_t(batch) * 9 * 4);
  ReorderPlan plan{
      ints, ints + batch, ints + 2 * batch, ints + 3 * batch, ints + 4 * batch, ints + 5 * batch, ints + 6 * batch};
  int32_t moves = 0, longest = 0;
  for (int32_t b = 0; b < batch; ++b) {
    plan.old_lengths[b] = lengths_[b];
    plan.old_special[b] = special_from_[b];
    plan.old_stored[b] = stored_[b];
    plan.old_extent[b] = slot_extent(b);
    if (indices[b] == b) continue;
    plan.pending[b] = 1;
    ++plan.readers[indices[b]];
    ++moves;
    longest = std::max(longest, slot_extent(indices[b]));
  }
  for (int32_t b = 0; b < batch; ++b)
    if (plan.pending[b] != 0 && plan.readers[b] == 0) plan.ready[plan.ready_count++] = b;
  // The buffer is needed when the chains from the unread sequences miss some (cycles); it is allocated
  // before anything moves, so that a failed allocation changes nothing.
  Workspace storage;
  CacheSequenceSpan buffer;
  if (chain_length(indices, plan, batch, ints + 7 * batch) < moves) {
    if (!storage.reserve(token_floats(config_, longest))) return Status::kOutOfMemory;
    buffer = buffer_span(config_, longest, storage.data());
  }
  // ---- move: write every ready sequence; what is left then are cycles, each read only from within:
  // save one sequence, write it, and the chain from its source ends at its reader, which takes the buffer.
  int32_t saved = -1;  // the sequence whose old tokens are in the buffer
  for (int32_t next = 0;;) {
    int32_t b = -1;
    if (plan.ready_count > 0) {
      b = plan.ready[--plan.ready_count];
    } else {
      while (next < batch && plan.pending[next] == 0) ++next;
      if (next == batch) break;
      b = next;
      copy_tokens(config_, buffer, sequence_span(b), plan.old_extent[b]);
      saved = b;
    }
    const int32_t source = indices[b];
    copy_tokens(config_, sequence_span(b), source == saved ? buffer : sequence_span(source), plan.old_extent[source]);
    lengths_[b] = plan.old_lengths[source];
    special_from_[b] = plan.old_special[source];
    stored_[b] = plan.old_stored[source];
    plan.pending[b] = 0;
    if (--plan.readers[source] == 0 && plan.pending[source] != 0) plan.ready[plan.ready_count++] = source;
  }
  return Status::kOk;
}

}  // namespace mha
