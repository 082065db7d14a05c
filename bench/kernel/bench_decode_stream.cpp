// Where a memory-bound decode step's time goes (not a test: it asserts nothing). For decode-mha-8k (one
// query row per KV head), per round and interleaved, each after an untimed 64 MiB read that evicts the
// LLC: plain SIMD streaming reads over exactly the K panels and V rows one step reads (whole regions, and
// in the kernel's order of 256-key blocks), against the simd128 decode kernel's K pass and V pass alone
// (phases skipped, as bench_decode's `phases`) and the whole step. `warm`: the same on T = 2048 (16 MiB
// of f32 cache, inside the 32 MiB L3), each variant run twice back to back and the second run timed.
//   node --no-experimental-fetch build/wasm/bench/bench_decode_stream.js [rounds] [warm]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "mha/decode/decode.hpp"
#include "mha/decode/decode_kernel.hpp"
#include "mha/cache/kv_cache.hpp"

#include "mha/core/test_seam.hpp"  // decode_phase_mask
#include "ceilings.hpp"            // now_ms, streaming_sum

static_assert(mha::test_seam::kEnabled, "the bench cores are built with the test seam (CMakeLists.txt)");

namespace {

#define NOINLINE __attribute__((noinline))

int32_t sink = 0;

// Sum of [p, p + bytes) (ceilings.hpp's streaming read).
NOINLINE void stream(const void* begin, size_t bytes) {
  const int32_t* p = static_cast<const int32_t*>(begin);
  sink += streaming_sum(p, p + bytes / 4);
}

struct Setup {
  int32_t heads = 16, length = 8192, dh = 64;
  std::unique_ptr<mha::KVCache> cache;
  size_t elem = 4;
  size_t k_head_bytes() const { return size_t(cache->panel_elements()) * ((length + 1 + 31) / 32) * elem; }
  size_t v_head_bytes() const { return size_t(length + 1) * 64 * elem; }
};

enum Kind {
  kStreamRegions,
  kStreamBlocks,
  kStreamKBlocks,
  kStreamVBlocks,
  kKernelK,
  kKernelV,
  kKernelAll,
  kStream32,
  kStream1024,
  kStream4096
};
const char* kind_name[] = {"stream K all, V all",  "stream K,V per block", "stream K blocks only",
                           "stream V blocks only", "kernel K pass",        "kernel V pass",
                           "kernel all phases",    "stream K,V per 32",    "stream K,V per 1024",
                           "stream K,V per 4096"};

std::vector<float> q, new_kv, out;
mha::DecodeScratch scratch;
mha::Workspace tiled;

NOINLINE void run(Kind kind, Setup& s) {
  const int32_t keys = s.length + 1;  // one step reads T + 1 keys
  if (kind <= kStreamVBlocks || kind >= kStream32) {
    const int32_t bk = kind == kStream32 ? 32 : kind == kStream1024 ? 1024 : kind == kStream4096 ? 4096 : 256;
    const int32_t blocks = (keys + bk - 1) / bk;
    const bool f16 = s.elem == 2;
    auto kp = [&](int32_t g) {
      return f16 ? (const void*)s.cache->key_panels<uint16_t>(0, g) : (const void*)s.cache->key_panels<float>(0, g);
    };
    auto vp = [&](int32_t g) {
      return f16 ? (const void*)s.cache->value_rows<uint16_t>(0, g) : (const void*)s.cache->value_rows<float>(0, g);
    };
    const size_t kb = size_t(bk) * 64 * s.elem;  // one block of K panels = one block of V rows
    if (kind == kStreamRegions) {
      stream(kp(0), s.k_head_bytes() * s.heads);
      stream(vp(0), s.v_head_bytes() * s.heads);
      return;
    }
    for (int32_t g = 0; g < s.heads; ++g)
      for (int32_t b = 0; b < blocks; ++b) {
        const size_t bytes = b + 1 < blocks ? kb : size_t(keys - b * bk) * 64 * s.elem;
        const size_t kbytes = b + 1 < blocks ? kb : size_t(32 * ((keys - b * bk + 31) / 32)) * 64 * s.elem;
        if (kind != kStreamVBlocks) stream(static_cast<const char*>(kp(g)) + b * kb, kbytes);
        if (kind != kStreamKBlocks) stream(static_cast<const char*>(vp(g)) + b * kb, bytes);
      }
    return;
  }
  mha::test_seam::decode_phase_mask = kind == kKernelK ? 3 : kind == kKernelV ? 9 : 15;
  mha::CacheAttendArgs args;
  args.new_tokens = 1;
  const int64_t width = int64_t{s.heads} * s.dh;
  args.q = {q.data(), width, width};
  args.k = {new_kv.data(), width, width};
  args.v = {new_kv.data(), width, width};
  args.out = {out.data(), width, width};
  args.num_heads = s.heads;
  args.scale = mha::default_scale(s.dh);
  args.kernel = &mha::default_decode_kernel();  // simd128: the bench cores are SIMD cores
  if (mha::cache_attend(*s.cache, args, scratch, nullptr, tiled) != mha::Status::kOk ||
      s.cache->truncate(s.length) != mha::Status::kOk)
    std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 20;
  const bool warm = argc > 2 && std::string(argv[2]) == "warm";
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Setup setups[2];
  for (int i = 0; i < 2; ++i) {
    Setup& s = setups[i];
    if (warm) s.length = 2048;
    s.elem = i == 0 ? 4 : 2;
    mha::KVCache::create(
        {1, s.heads, s.dh, s.length + 1, i == 0 ? mha::CacheDType::kFloat32 : mha::CacheDType::kFloat16}, s.cache);
    std::vector<float> k(size_t(s.length) * s.heads * s.dh), v(k.size());
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    const int32_t w = s.heads * s.dh;
    s.cache->append({k.data(), int64_t{s.length} * w, w}, {v.data(), int64_t{s.length} * w, w}, s.length);
  }
  q.resize(16 * 64), new_kv.resize(16 * 64), out.resize(16 * 64);
  for (float& x : q) x = normal(rng);
  for (float& x : new_kv) x = normal(rng);
  const size_t evict_bytes = size_t{64} << 20;
  void* evict = std::aligned_alloc(64, evict_bytes);
  std::memset(evict, 1, evict_bytes);
  constexpr int kinds = 10;
  std::vector<double> ms[2][kinds];
  for (int round = 0; round < 3 + rounds; ++round)
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < kinds; ++k) {
        const int kind = round % 2 == 0 ? k : kinds - 1 - k;
        if (warm) {
          run(Kind(kind), setups[i]);
        } else {
          stream(evict, evict_bytes);
        }
        const double t0 = now_ms();
        run(Kind(kind), setups[i]);
        const double t = now_ms() - t0;
        if (round >= 3) ms[i][kind].push_back(t);
      }
  std::printf("%d rounds, decode-mha T=%d, %s\n", rounds, setups[0].length,
              warm ? "warm (second of two runs)" : "cold (LLC evicted)");
  for (int i = 0; i < 2; ++i) {
    const double bytes = 2.0 * double(setups[i].length + 1) * 64 * 16 * double(setups[i].elem);
    for (int k = 0; k < kinds; ++k) {
      std::vector<double> v = ms[i][k];
      std::sort(v.begin(), v.end());
      const double med = v[v.size() / 2];
      const double gb =
          (k == kStreamKBlocks || k == kStreamVBlocks || k == kKernelK || k == kKernelV) ? bytes / 2 : bytes;
      std::printf("%-4s %-22s %8.3f ms [%7.3f - %7.3f]  %6.2f GB/s\n", i == 0 ? "f32" : "f16", kind_name[k], med,
                  v.front(), v.back(), gb / (med * 1e6));
    }
  }
  std::printf("(checksum %d)\n", sink);
  return 0;
}
