// Bindings: marshalling only. JavaScript passes heap addresses (as unsigned integers) and dims to plain
// C exports, which return an mha::Status code that web/src turns into a precise JS error; Embind serves
// the few calls made once per instance. All semantics live in src/mha; nothing here computes.
#include <emscripten/bind.h>
#include <emscripten/em_macros.h>
#include <malloc.h>

#include <cstdint>
#include <memory>
#include <string>

#include "mha/kernel.hpp"
#include "mha/heads.hpp"
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

}  // extern "C"

namespace {

void release_scratch() {
  g_workspace.release();
  if (g_parallel) g_parallel->release_scratch();
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
}
