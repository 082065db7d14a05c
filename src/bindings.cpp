// Bindings: marshalling only. JavaScript passes heap addresses (as unsigned integers) and dims to plain
// C exports, which return an mha::Status code that web/src turns into a precise JS error; Embind serves
// the few calls made once per instance. All semantics live in src/mha; nothing here computes.
#include <emscripten/bind.h>
#include <emscripten/em_macros.h>
#include <emscripten/val.h>
#include <malloc.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mha/attention.hpp"
#include "mha/decode.hpp"
#include "mha/heads.hpp"
#include "mha/kv_cache.hpp"
#include "mha/parallel.hpp"
#include "mha/reference.hpp"  // attention weights come from the reference

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

// One mha_kv_cache_attend call, written by web/src into the instance's scratch arena. Every field is 4
// bytes (wasm32); the offsets reach TS through kvCacheAttendCallLayout() (offsetof), never hand-copied.
struct CacheAttendCallAbi {
  uint32_t cache;                     // id from mha_kv_cache_create
  uint32_t q, k, v, out;              // heap addresses: q, out (B, n, H*Dh), k, v (B, n, Hkv*Dh); dense float32
  uint32_t alibi_slopes;              // 0 = none; float32 (H)
  int32_t new_tokens;                 // n >= 1
  int32_t num_heads;                  // H, a multiple of the cache's Hkv
  int32_t causal;                     // 0 / 1 (the API's default is 1)
  int32_t window_left, window_right;  // -1 = Infinity
  int32_t empty_rows;                 // 0 = 'nan', 1 = 'zero'
  float scale;                        // resolved by the caller (1/sqrt(Dh) default)
  float softcap;                      // 0 = none
};

template <typename T>
T* at(uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

mha::AttentionArgs make_args(uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t out, uintptr_t mask, int32_t batch,
                             int32_t seq_len, int32_t kv_seq_len, int32_t d_model, int32_t num_heads, bool causal,
                             float scale) {
  mha::AttentionArgs args;
  args.shape = mha::AttentionShape{batch, seq_len, kv_seq_len, d_model, num_heads};
  args.q = mha::dense_view(at<const float>(q), seq_len, d_model);
  args.k = mha::dense_view(at<const float>(k), kv_seq_len, d_model);
  args.v = mha::dense_view(at<const float>(v), kv_seq_len, d_model);
  args.out = mha::dense_view(at<float>(out), seq_len, d_model);
  args.mask = at<const uint8_t>(mask);
  args.causal = causal;
  args.scale = scale;
  return args;
}

}  // namespace

// The per-call functions are plain C exports rather than Embind functions: with -sDYNAMIC_EXECUTION=0
// (no eval, so pages with a strict CSP work) Embind invokes through a generic `arguments` loop that
// costs microseconds, as much as a whole seed-sized attention. A direct export is one wasm call.
extern "C" {

EMSCRIPTEN_KEEPALIVE int32_t mha_attention(uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t out, uintptr_t mask, int32_t batch,
                  int32_t seq_len, int32_t kv_seq_len, int32_t d_model, int32_t num_heads, int32_t causal,
                  float scale) {
  const auto args = make_args(q, k, v, out, mask, batch, seq_len, kv_seq_len, d_model, num_heads, causal != 0, scale);
  if (g_parallel) return static_cast<int32_t>(g_parallel->run(args));
  return static_cast<int32_t>(mha::attention(args, g_workspace));
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

EMSCRIPTEN_KEEPALIVE int32_t mha_attention_weights(uintptr_t q, uintptr_t k, uintptr_t weights, uintptr_t mask, int32_t batch,
                          int32_t seq_len, int32_t kv_seq_len, int32_t d_model, int32_t num_heads, int32_t causal,
                          float scale) {
  const auto args = make_args(q, k, 0, 0, mask, batch, seq_len, kv_seq_len, d_model, num_heads, causal != 0, scale);
  return static_cast<int32_t>(mha::reference_attention_weights(args, at<float>(weights)));
}

EMSCRIPTEN_KEEPALIVE int32_t mha_split_heads(uintptr_t x, uintptr_t xh, int32_t batch, int32_t seq_len, int32_t d_model, int32_t num_heads) {
  return static_cast<int32_t>(mha::split_heads(at<const float>(x), batch, seq_len, d_model, num_heads, at<float>(xh)));
}

EMSCRIPTEN_KEEPALIVE int32_t mha_merge_heads(uintptr_t xh, uintptr_t x, int32_t batch, int32_t seq_len, int32_t d_model, int32_t num_heads) {
  return static_cast<int32_t>(mha::merge_heads(at<const float>(xh), batch, seq_len, d_model, num_heads, at<float>(x)));
}

// ---- The KV cache (src/mha/kv_cache.hpp, decode.hpp). A cache is named by a uint32 id of this instance's
// registry; every export takes the id and reports an unknown or freed one as kCacheInvalid.

// Bytes of K and V storage a cache of these dims needs (what mha_kv_cache_create allocates), or -1 for a
// non-positive dim or an unknown dtype (0 = float32, 1 = float16). For the RangeError of a cache that
// cannot fit the heap (status kCacheTooLarge at create).
EMSCRIPTEN_KEEPALIVE double mha_kv_cache_bytes(int32_t batch, int32_t num_kv_heads, int32_t head_dim, int32_t capacity, int32_t dtype) {
  return mha::kv_cache_bytes(mha::KVCacheConfig{batch, num_kv_heads, head_dim, capacity, static_cast<mha::CacheDType>(dtype)});
}

// Creates an empty cache; writes its id (uint32, never 0) at `id_out`, or 0 on error.
EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_create(int32_t batch, int32_t num_kv_heads, int32_t head_dim, int32_t capacity, int32_t dtype,
                                                  uintptr_t id_out) {
  const mha::KVCacheConfig config{batch, num_kv_heads, head_dim, capacity, static_cast<mha::CacheDType>(dtype)};
  return static_cast<int32_t>(g_caches.create(config, at<uint32_t>(id_out)));
}

// Ids issued from now on start at `id` (not 0): a random base per instance makes another instance's ids
// unknown here.
EMSCRIPTEN_KEEPALIVE void mha_kv_cache_set_next_id(uint32_t id) { g_caches.set_next_id(id); }

EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_free(uint32_t id) { return static_cast<int32_t>(g_caches.free(id)); }

// Frees every cache of the instance (dispose).
EMSCRIPTEN_KEEPALIVE void mha_kv_cache_free_all() { g_caches.free_all(); }

// The cache's length (>= 0), or -kCacheInvalid (-34) when there is no such cache.
EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_length(uint32_t id) {
  const mha::KVCache* cache = g_caches.find(id);
  return cache != nullptr ? cache->length() : -static_cast<int32_t>(mha::Status::kCacheInvalid);
}

EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_truncate(uint32_t id, int32_t length) {
  mha::KVCache* cache = g_caches.find(id);
  return static_cast<int32_t>(cache != nullptr ? cache->truncate(length) : mha::Status::kCacheInvalid);
}

// Copies the stored tokens out as k, v (B, length, Hkv*Dh) float32 (f16 caches decoded exactly).
EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_read(uint32_t id, uintptr_t k_out, uintptr_t v_out) {
  const mha::KVCache* cache = g_caches.find(id);
  if (cache == nullptr) return static_cast<int32_t>(mha::Status::kCacheInvalid);
  if (cache->length() > 0 && (k_out == 0 || v_out == 0)) return static_cast<int32_t>(mha::Status::kNullPointer);
  cache->read(at<float>(k_out), at<float>(v_out));
  return static_cast<int32_t>(mha::Status::kOk);
}

// Appends the call's k, v to its cache and writes out; on any error nothing changed (cache nor out).
EMSCRIPTEN_KEEPALIVE int32_t mha_kv_cache_attend(uintptr_t call_address) {
  const CacheAttendCallAbi& call = *at<const CacheAttendCallAbi>(call_address);
  mha::KVCache* cache = g_caches.find(call.cache);
  if (cache == nullptr) return static_cast<int32_t>(mha::Status::kCacheInvalid);
  const mha::KVCacheConfig& c = cache->config();
  const int32_t n = call.new_tokens;
  const int64_t q_width = int64_t{call.num_heads} * c.head_dim, kv_width = int64_t{c.num_kv_heads} * c.head_dim;
  mha::CacheAttendArgs args;
  args.new_tokens = n;
  args.q = {at<const float>(call.q), n * q_width, q_width};
  args.k = {at<const float>(call.k), n * kv_width, kv_width};
  args.v = {at<const float>(call.v), n * kv_width, kv_width};
  args.out = {at<float>(call.out), n * q_width, q_width};
  args.options.num_heads = call.num_heads;
  args.options.causal = call.causal != 0;
  args.options.window_left = call.window_left;
  args.options.window_right = call.window_right;
  args.options.softcap = call.softcap;
  args.options.alibi_slopes = at<const float>(call.alibi_slopes);
  args.options.scale = call.scale;
  args.options.empty_rows_zero = call.empty_rows != 0;
  return static_cast<int32_t>(mha::cache_attend(*cache, args, g_decode, g_parallel.get(), g_workspace));
}

}  // extern "C"

namespace {

void release_scratch() {
  g_workspace.release();
  if (g_parallel) g_parallel->release_scratch();
  g_decode.release();
}

// {fieldName: byteOffset, ..., size} of CacheAttendCallAbi.
emscripten::val kv_cache_attend_call_layout() {
  emscripten::val layout = emscripten::val::object();
#define MHA_FIELD(name) layout.set(#name, static_cast<int>(offsetof(CacheAttendCallAbi, name)))
  MHA_FIELD(cache), MHA_FIELD(q), MHA_FIELD(k), MHA_FIELD(v), MHA_FIELD(out), MHA_FIELD(alibi_slopes);
  MHA_FIELD(new_tokens), MHA_FIELD(num_heads), MHA_FIELD(causal), MHA_FIELD(window_left), MHA_FIELD(window_right);
  MHA_FIELD(empty_rows), MHA_FIELD(scale), MHA_FIELD(softcap);
#undef MHA_FIELD
  layout.set("size", static_cast<int>(sizeof(CacheAttendCallAbi)));
  return layout;
}

// Bytes currently allocated by malloc in this instance (for leak checks and memory reporting).
double heap_bytes_in_use() { return static_cast<double>(mallinfo().uordblks); }

std::string version() { return MHA_VERSION; }

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
  emscripten::function("version", &version);
  emscripten::function("simd", &simd);
  emscripten::function("kvCacheAttendCallLayout", &kv_cache_attend_call_layout);
}
