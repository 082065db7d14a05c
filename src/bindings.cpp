// Bindings: marshalling only. JavaScript passes heap addresses (as unsigned integers) and dims to plain
// C exports (an attention call as one struct on the heap, AttentionCallAbi), which return an mha::Status
// code that web/src turns into a precise JS error; Embind serves the few calls made once per instance or
// on an error. All semantics live in src/mha; nothing here computes.
#include <emscripten/bind.h>
#include <emscripten/em_macros.h>
#include <emscripten/heap.h>
#include <emscripten/val.h>
#include <malloc.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "call_abi.hpp"
#include "mha/decode/decode.hpp"
#include "mha/core/f16_tensor.hpp"
#include "mha/kernels/kernel.hpp"
#include "mha/core/heads.hpp"
#include "mha/cache/kv_cache.hpp"
#include "mha/cache/kv_cache_io.hpp"
#include "mha/core/parallel.hpp"
#include "mha/reference/reference.hpp"  // attention weights come from the reference

#ifndef MHA_VERSION
#error "MHA_VERSION must be defined by the build (it comes from package.json)"
#endif

namespace {

// Scratch reused by every call of this instance (each wasm instance has its own memory and globals).
mha::Workspace g_workspace;

// The thread pool of a threaded build, created by mha_set_threads; null = run on the calling thread.
std::unique_ptr<mha::ParallelAttention> g_parallel;

// The instance's KV caches, and the decode kernel's scratch (reused by every attend call).
mha::KVCacheRegistry g_caches;
mha::DecodeScratch g_decode;

// Why the last mha_kv_cache_load refused its bytes (kv_cache_io.hpp), for the RangeError, and the parameter
// at fault ("bytes: " or "capacity: "): fixed buffers, so that a failed load keeps nothing on the heap.
mha::LoadMessage g_load_error;
const char* g_load_parameter = "";

template <typename T>
T* at(uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

// The call structs (AttentionCallAbi, CacheAttendCallAbi) and their field tables (kAttentionCallFields,
// kCacheAttendCallFields) come from one list each in call_abi.hpp; the field offsets reach web/src through
// attentionCallLayout() and kvCacheAttendCallLayout(), so TypeScript writes fields by name and no offset is
// copied by hand; it refuses a module whose fields are not the ones it writes.

// What the core's AttentionArgs cannot express about a call: the bias's broadcast dims must be 1 or B and
// 1 or H (they become zero strides), and attention_weights has no lse output (an option that does not
// apply to the function is refused, never ignored). Everything else the core validates.
mha::Status call_status(const AttentionCallAbi& call, bool weights) {
  if (call.bias != 0 && ((call.bias_batch != 1 && call.bias_batch != call.batch) ||
                         (call.bias_heads != 1 && call.bias_heads != call.num_heads))) {
    return mha::Status::kBadBiasShape;
  }
  if (weights && call.lse != 0) return mha::Status::kUnsupportedOption;
  // stage is an option of attention_weights only; v_head_dim changes nothing there (it has no v), so a
  // multi-head call must leave stage at softmax and attention_weights must leave v_head_dim at 0.
  if (weights ? call.v_head_dim != 0 : call.stage != static_cast<int32_t>(mha::ScoreStage::kSoftmax)) {
    return mha::Status::kUnsupportedOption;
  }
  if (weights && (call.stage < 0 || call.stage > static_cast<int32_t>(mha::ScoreStage::kSoftmax)))
    return mha::Status::kBadStage;
  return mha::Status::kOk;
}

// The option fields of either call struct (one list, MHA_OPTION_FIELDS) as the core's options; the core
// validates them (an empty_rows other than 0 and 1 is kBadEmptyRows there).
template <typename Call>
mha::AttentionOptions read_options(const Call& call) {
  mha::AttentionOptions o;
  o.causal = call.causal != 0;
  o.scale = call.scale;
  o.window_left = call.window_left;
  o.window_right = call.window_right;
  o.softcap = call.softcap;
  o.alibi_slopes = at<const float>(call.alibi_slopes);
  o.empty_rows = static_cast<mha::EmptyRows>(call.empty_rows);
  o.sinks = at<const float>(call.sinks);
  o.rope = mha::RotaryTables{at<const float>(call.rope_cos), at<const float>(call.rope_sin), call.rope_positions,
                             call.rope_rotary_dim,           call.rope_interleaved != 0,     call.rope_first_position};
  return o;
}

// q (B, S, D), k (B, T, Hkv*Dh), v (B, T, Hkv*Dv), out (B, S, H*Dv), bias [bias_batch, bias_heads, S, T] with zero
// strides over its broadcast dims, lse (B, H, S); attention_weights passes v = out = 0.
mha::AttentionArgs make_args(const AttentionCallAbi& call, uintptr_t v, uintptr_t out) {
  mha::AttentionArgs args;
  args.shape = mha::AttentionShape{call.batch,     call.seq_len,      call.kv_seq_len, call.d_model,
                                   call.num_heads, call.num_kv_heads, call.v_head_dim};
  // A k row is Hkv * Dh floats, a v row Hkv * Dv, an out row H * Dv (validate_args refuses the call if
  // the dims do not divide or are out of range).
  const bool dims_ok = call.num_heads > 0 && call.num_kv_heads > 0 && call.v_head_dim >= 0;
  const int32_t kv_d_model = dims_ok ? static_cast<int32_t>(args.shape.kv_d_model()) : call.d_model;
  const int32_t v_d_model = dims_ok ? static_cast<int32_t>(args.shape.v_d_model()) : call.d_model;
  const int32_t out_d_model = dims_ok ? static_cast<int32_t>(args.shape.out_d_model()) : call.d_model;
  args.q = mha::dense_view(at<const float>(call.q), call.seq_len, call.d_model);
  args.k = mha::dense_view(at<const float>(call.k), call.kv_seq_len, kv_d_model);
  args.v = mha::dense_view(at<const float>(v), call.kv_seq_len, v_d_model);
  args.out = mha::dense_view(at<float>(out), call.seq_len, out_d_model);
  args.options() = read_options(call);
  args.mask = at<const uint8_t>(call.mask);
  args.query_offset = call.query_offset;
  args.kv_lengths = at<const int32_t>(call.kv_lengths);
  if (call.bias != 0) {
    const int64_t plane = int64_t{call.seq_len} * call.kv_seq_len;  // (S, T)
    args.bias = mha::BiasView{at<const float>(call.bias), call.bias_batch == 1 ? 0 : call.bias_heads * plane,
                              call.bias_heads == 1 ? 0 : plane};
  }
  args.lse = at<float>(call.lse);
  return args;
}

}  // namespace

// The per-call functions are plain C exports rather than Embind functions: with -sDYNAMIC_EXECUTION=0
// (no eval, so pages with a strict CSP work) Embind invokes through a generic `arguments` loop that
// costs microseconds, as much as a whole seed-sized attention. A direct export is one wasm call, and its
// one argument is the address of an AttentionCallAbi.
extern "C" {

EMSCRIPTEN_KEEPALIVE int32_t mha_attention(uintptr_t call_address) {
  const AttentionCallAbi& call = *at<const AttentionCallAbi>(call_address);
  const mha::Status status = call_status(call, /*weights=*/false);
  if (status != mha::Status::kOk) return static_cast<int32_t>(status);
  const auto args = make_args(call, call.v, call.out);
  if (g_parallel) return static_cast<int32_t>(g_parallel->run(args));
  return static_cast<int32_t>(mha::attention(args, g_workspace));
}

// mha_attention in two halves, for a caller that stages the next slice of a batch while this slice
// computes (web/src/instance.ts): begin reads the struct (it may be rewritten right after) and returns the
// status of the checks; on a pool it returns while the workers compute, else when the call is done. Two
// calls may be pending (ParallelAttention::begin); join returns when the oldest is done, and its
// buffers must stay untouched until then. A refused call leaves nothing to join.
EMSCRIPTEN_KEEPALIVE int32_t mha_attention_begin(uintptr_t call_address) {
  const AttentionCallAbi& call = *at<const AttentionCallAbi>(call_address);
  const mha::Status status = call_status(call, /*weights=*/false);
  if (status != mha::Status::kOk) return static_cast<int32_t>(status);
  const auto args = make_args(call, call.v, call.out);
  if (g_parallel) return static_cast<int32_t>(g_parallel->begin(args));
  return static_cast<int32_t>(mha::attention(args, g_workspace));
}

EMSCRIPTEN_KEEPALIVE void mha_attention_join() {
  if (g_parallel) g_parallel->join();
}

// Starts a pool of `threads` threads (the caller included) and returns how many it got; 1 (no pool) in
// builds without pthreads or when threads <= 1. Replaces any previous pool.
EMSCRIPTEN_KEEPALIVE int32_t mha_set_threads(int32_t threads) {
  if (g_parallel) g_parallel->stop_threads();  // without blocking the (browser) main thread
  g_parallel.reset();
#ifdef __EMSCRIPTEN_PTHREADS__
  if (threads > 1) g_parallel = std::make_unique<mha::ParallelAttention>(threads);
#endif
  return g_parallel ? g_parallel->threads() : 1;
}

// The (B, H, S, T) weights go to `out`; `v` is not read.
EMSCRIPTEN_KEEPALIVE int32_t mha_attention_weights(uintptr_t call_address) {
  const AttentionCallAbi& call = *at<const AttentionCallAbi>(call_address);
  const mha::Status status = call_status(call, /*weights=*/true);
  if (status != mha::Status::kOk) return static_cast<int32_t>(status);
  const auto args = make_args(call, 0, 0);
  return static_cast<int32_t>(
      mha::reference_attention_weights(args, at<float>(call.out), static_cast<mha::ScoreStage>(call.stage)));
}

// float16 tensors (docs/spec.md 4.2), in place over one staging slot (f16_tensor.hpp says how far apart
// the two may start): n binary16 values at `halves` widened to float32 at `floats`, and back, rounded once.
EMSCRIPTEN_KEEPALIVE void mha_widen_halves(uintptr_t halves, uintptr_t floats, int32_t n) {
  mha::widen_halves(at<const uint16_t>(halves), at<float>(floats), n);
}
EMSCRIPTEN_KEEPALIVE void mha_narrow_floats(uintptr_t floats, uintptr_t halves, int32_t n) {
  mha::narrow_floats(at<const float>(floats), at<uint16_t>(halves), n);
}

EMSCRIPTEN_KEEPALIVE int32_t mha_split_heads(uintptr_t x, uintptr_t xh, int32_t batch, int32_t seq_len, int32_t d_model,
                                             int32_t num_heads) {
  return static_cast<int32_t>(mha::split_heads(at<const float>(x), batch, seq_len, d_model, num_heads, at<float>(xh)));
}

EMSCRIPTEN_KEEPALIVE int32_t mha_merge_heads(uintptr_t xh, uintptr_t x, int32_t batch, int32_t seq_len, int32_t d_model,
                                             int32_t num_heads) {
  return static_cast<int32_t>(mha::merge_heads(at<const float>(xh), batch, seq_len, d_model, num_heads, at<float>(x)));
}

// ---- The KV cache (src/mha/cache/kv_cache.hpp, decode.hpp). A cache is named by a uint32 id of this instance's
// registry; every export takes the id and reports an unknown or freed one as kCacheInvalid.

// Bytes of K and V storage a cache of these dims needs (what mha_kv_cache_create allocates), or -1 for a
// non-positive dim or an unknown dtype (the CacheDType numbers of cache_codecs.hpp). value_dim: Dv, 0 = Dh. For
// the RangeError of a cache that cannot fit the heap (status kCacheTooLarge at create).
EMSCRIPTEN_KEEPALIVE double mha_kv_cache_bytes(int32_t batch, int32_t num_kv_heads, int32_t head_dim, int32_t capacity,
                                               int32_t dtype, int32_t value_dim) {
  return mha::kv_cache_bytes(
      mha::KVCacheConfig{batch, num_kv_heads, head_dim, capacity, static_cast<mha::CacheDType>(dtype), value_dim});
}

// Creates an empty cache; writes its id (uint32, never 0) at `id_out`, or 0 on error. value_dim: Dv, 0 = Dh;
// ring: nonzero for a ring cache (docs/spec.md 5.5); integer: nonzero for integer arithmetic (5.1).
EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_create(int32_t batch, int32_t num_kv_heads, int32_t head_dim,
                                                 int32_t capacity, int32_t dtype, int32_t value_dim, int32_t ring,
                                                 int32_t integer, uintptr_t id_out) {
  mha::KVCacheConfig config{batch, num_kv_heads, head_dim, capacity, static_cast<mha::CacheDType>(dtype), value_dim};
  config.ring = ring != 0;
  config.integer = integer != 0;
  return static_cast<int32_t>(g_caches.create(config, at<uint32_t>(id_out)));
}

// Ids issued from now on start at `id` (not 0): a random base per instance makes another instance's ids
// unknown here.
EMSCRIPTEN_KEEPALIVE void mha_kv_cache_set_next_id(uint32_t id) { g_caches.set_next_id(id); }

EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_free(uint32_t id) { return static_cast<int32_t>(g_caches.free(id)); }

// Frees every cache of the instance (dispose).
EMSCRIPTEN_KEEPALIVE void mha_kv_cache_free_all() { g_caches.free_all(); }

// Writes the B per-sequence lengths at `lengths_out` (int32), then their B stored counts.
EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_lengths(uint32_t id, uintptr_t lengths_out) {
  const mha::KVCache* cache = g_caches.find(id);
  if (cache == nullptr) return static_cast<int32_t>(mha::Status::kCacheInvalid);
  const int32_t batch = cache->config().batch;
  std::copy_n(cache->lengths(), batch, at<int32_t>(lengths_out));
  std::copy_n(cache->stored_counts(), batch, at<int32_t>(lengths_out) + batch);
  return static_cast<int32_t>(mha::Status::kOk);
}

// Keeps min(length(b), length) tokens of every sequence.
EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_truncate(uint32_t id, int32_t length) {
  mha::KVCache* cache = g_caches.find(id);
  return static_cast<int32_t>(cache != nullptr ? cache->truncate(length) : mha::Status::kCacheInvalid);
}

// Sets every sequence's length from `lengths` (int32 (B), each at most the current one).
EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_truncate_each(uint32_t id, uintptr_t lengths) {
  mha::KVCache* cache = g_caches.find(id);
  return static_cast<int32_t>(cache != nullptr ? cache->truncate_each(at<const int32_t>(lengths))
                                               : mha::Status::kCacheInvalid);
}

// Sequence b takes what sequence indices[b] held (indices: int32 (B)); kv_cache.hpp's reorder.
EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_reorder(uint32_t id, uintptr_t indices) {
  mha::KVCache* cache = g_caches.find(id);
  return static_cast<int32_t>(cache != nullptr ? cache->reorder(at<const int32_t>(indices))
                                               : mha::Status::kCacheInvalid);
}

// Copies tokens [start, end) of every sequence out as k (B, end - start, Hkv*Dh), v (B, end - start,
// Hkv*Dv): float32, or with `stored` the cache's own elements (float16 bits for a float16 cache).
EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_read(uint32_t id, uintptr_t k_out, uintptr_t v_out, int32_t start,
                                               int32_t end, int32_t stored) {
  const mha::KVCache* cache = g_caches.find(id);
  if (cache == nullptr) return static_cast<int32_t>(mha::Status::kCacheInvalid);
  if (stored != 0) return static_cast<int32_t>(cache->read_stored(at<void>(k_out), at<void>(v_out), start, end));
  return static_cast<int32_t>(cache->read(at<float>(k_out), at<float>(v_out), start, end));
}

// The dims of a cache (for loadKVCache): batch, num_kv_heads, head_dim, capacity, dtype, Dv (never 0) and
// ring (0 or 1) as int32 at `config_out`.
EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_config(uint32_t id, uintptr_t config_out) {
  const mha::KVCache* cache = g_caches.find(id);
  if (cache == nullptr) return static_cast<int32_t>(mha::Status::kCacheInvalid);
  const mha::KVCacheConfig& c = cache->config();
  const int32_t fields[] = {c.batch,       c.num_kv_heads, c.head_dim,       c.capacity, static_cast<int32_t>(c.dtype),
                            c.value_dim(), c.ring ? 1 : 0, c.integer ? 1 : 0};
  std::copy_n(fields, 8, at<int32_t>(config_out));
  return static_cast<int32_t>(mha::Status::kOk);
}

// Bytes mha_kv_cache_save writes for the cache (docs/cache-format.md), or -1 for no such cache.
EMSCRIPTEN_KEEPALIVE double mha_kv_cache_saved_bytes(uint32_t id) {
  const mha::KVCache* cache = g_caches.find(id);
  return cache != nullptr ? static_cast<double>(mha::KVCacheStorage::saved_bytes(*cache)) : -1.0;
}

// Writes the save, exactly mha_kv_cache_saved_bytes(id) bytes, at `dst`.
EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_save(uint32_t id, uintptr_t dst, int32_t size) {
  const mha::KVCache* cache = g_caches.find(id);
  if (cache == nullptr) return static_cast<int32_t>(mha::Status::kCacheInvalid);
  return static_cast<int32_t>(mha::KVCacheStorage::save(*cache, at<uint8_t>(dst), size));
}

// A new cache of the `size` saved bytes at `src` (capacity 0: the saved one; integer: nonzero for integer
// arithmetic); its id at `id_out`, or 0 and the reason in kvCacheLoadError(), led by the parameter at fault
// ("bytes: ...", "capacity: ..." or "arithmetic: ...").
EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_load(uintptr_t src, int32_t size, int32_t capacity, int32_t integer,
                                               uintptr_t id_out) {
  *at<uint32_t>(id_out) = 0;
  std::unique_ptr<mha::KVCache> cache;
  const mha::Status status =
      mha::KVCacheStorage::load(at<const uint8_t>(src), size, capacity, cache, &g_load_error, integer != 0);
  // The parameter at fault, as the RangeError names it: the bytes, unless they are a save and the requested
  // capacity or arithmetic is what cannot be (below the longest sequence, too large; a float dtype).
  g_load_parameter = status == mha::Status::kCacheBadArithmetic              ? "arithmetic: "
                     : status == mha::Status::kCacheBadSave || capacity == 0 ? "bytes: "
                                                                             : "capacity: ";
  if (status != mha::Status::kOk) return static_cast<int32_t>(status);
  return static_cast<int32_t>(g_caches.adopt(std::move(cache), at<uint32_t>(id_out)));
}

// Appends the call's k, v to its cache and writes out; on any error nothing changed (cache nor out).
EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_attend(uintptr_t call_address) {
  const CacheAttendCallAbi& call = *at<const CacheAttendCallAbi>(call_address);
  mha::KVCache* cache = g_caches.find(call.cache);
  if (cache == nullptr) return static_cast<int32_t>(mha::Status::kCacheInvalid);
  const mha::KVCacheConfig& c = cache->config();
  const int32_t n = call.new_tokens;
  const int32_t value_dim = c.value_dim();  // Dv
  const int64_t q_width = int64_t{call.num_heads} * c.head_dim, kv_width = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t v_width = int64_t{c.num_kv_heads} * value_dim, out_width = int64_t{call.num_heads} * value_dim;
  mha::CacheAttendArgs args;
  args.options() = read_options(call);
  args.num_heads = call.num_heads;
  args.new_tokens = n;
  args.new_token_counts = at<const int32_t>(call.new_token_counts);
  args.q = {at<const float>(call.q), n * q_width, q_width};
  args.k = {at<const float>(call.k), n * kv_width, kv_width};
  args.v = {at<const float>(call.v), n * v_width, v_width};
  args.out = {at<float>(call.out), n * out_width, out_width};
  args.lse = at<float>(call.lse);
  if (call.prefix != 0) {
    args.prefix = g_caches.find(call.prefix);
    if (args.prefix == nullptr) return static_cast<int32_t>(mha::Status::kCacheInvalid);
  }
  return static_cast<int32_t>(mha::cache_attend(*cache, args, g_decode, g_parallel.get(), g_workspace));
}

}  // extern "C"

namespace {

void release_scratch() {
  g_workspace.release();
  if (g_parallel) g_parallel->release_scratch();
  g_decode.release();
}

// {fieldName: byteOffset} of CacheAttendCallAbi, and its `size` in bytes.
emscripten::val kv_cache_attend_call_layout() {
  emscripten::val layout = emscripten::val::object();
  for (const AbiField& field : kCacheAttendCallFields) layout.set(field.name, static_cast<int32_t>(field.offset));
  layout.set("size", static_cast<int32_t>(sizeof(CacheAttendCallAbi)));
  return layout;
}

// Bytes currently allocated by malloc in this instance (for leak checks and memory reporting). mallinfo's
// fields are ints: a heap past 2 GiB reads back through uint32_t.
double heap_bytes_in_use() { return static_cast<double>(static_cast<uint32_t>(mallinfo().uordblks)); }

// The most the heap may grow to: what the glue's resize accepts. With -sMAXIMUM_MEMORY=4GB
// (CMakeLists.txt, MHA_MAXIMUM_MEMORY) Emscripten 3.1.6 stops one 64 KiB page short: 4294901760.
double max_memory_bytes() { return static_cast<double>(emscripten_get_heap_max()); }

std::string version() { return MHA_VERSION; }

// Why the last mha_kv_cache_load failed ('' after a success), in the API's terms: "bytes: ..." or
// "capacity: ...".
std::string kv_cache_load_error() {
  if (g_load_error.empty()) return std::string();
  std::string text(g_load_parameter);
  return text.append(g_load_error.text);
}

// {field name: byte offset} of AttentionCallAbi, and its `size` in bytes.
emscripten::val attention_call_layout() {
  emscripten::val layout = emscripten::val::object();
  for (const AbiField& field : kAttentionCallFields) layout.set(field.name, static_cast<int32_t>(field.offset));
  layout.set("size", static_cast<int32_t>(sizeof(AttentionCallAbi)));
  return layout;
}

// The message of a status code returned by an export, in the JavaScript API's terms; an empty string for a
// number that is no mha::Status. Called on the error path only.
std::string status_message(int32_t status) {
  const char* message = mha::status_message(static_cast<mha::Status>(status));
  return message != nullptr ? message : "";
}

// True when the kernel was compiled for WebAssembly SIMD128.
bool simd() {
#ifdef __wasm_simd128__
  return true;
#else
  return false;
#endif
}

}  // namespace

EMSCRIPTEN_BINDINGS(mha_wasm) {
  emscripten::function("releaseScratch", &release_scratch);
  emscripten::function("heapBytesInUse", &heap_bytes_in_use);
  emscripten::function("maxMemoryBytes", &max_memory_bytes);
  emscripten::function("version", &version);
  emscripten::function("simd", &simd);
  emscripten::function("attentionCallLayout", &attention_call_layout);
  emscripten::function("kvCacheAttendCallLayout", &kv_cache_attend_call_layout);
  emscripten::function("statusMessage", &status_message);
  emscripten::function("kvCacheLoadError", &kv_cache_load_error);
}
