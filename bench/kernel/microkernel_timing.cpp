// Micro-kernel timing harness: not a test (it asserts nothing and no suite runs it). It times the QK^T and
// PV micro-kernels of one kernel variant (simd128_tiles.hpp: qk_tile, pv_tile) alone, on one key tile held
// in cache (Dh = 64, 128 keys, 4 query rows per call), so their arithmetic rate can be set against the
// ceiling micro-benchmarks (bench/lib/ceiling.mjs: 12 independent mul+add, or relaxed_madd, chains):
//
//   cmake --build build/wasm --target mha_microkernel_timing mha_microkernel_timing_relaxed
//   node build/wasm/mha_microkernel_timing.cjs [trials]
//   node --experimental-wasm-relaxed-simd build/wasm/mha_microkernel_timing_relaxed.cjs [trials]
//
// The same .cjs files run in a browser page (bench/browser/microkernels.mjs loads them there). Output: one
// line per micro-kernel, `variant name gflops`: the best of `trials` timed batches (best, not median: the
// kernel's own rate, which a busy machine can only lower). Flops: 2 per multiply-add.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "mha/kernels/simd128_tiles.hpp"

namespace {

using namespace mha::MHA_SIMD_VARIANT;

constexpr int32_t kHeadDim = 64;
constexpr int32_t kKeys = kTileStride;  // one full key tile
constexpr int32_t kCallsPerBatch = 2000;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Keeps the compiler from dropping or merging calls whose stores nobody reads.
inline void clobber(const void* p) { __asm__ volatile("" : : "r"(p) : "memory"); }

struct AlignedFloats {
  explicit AlignedFloats(size_t n)
      : data(static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64))) {}
  ~AlignedFloats() { std::free(data); }
  float* data;
};

// One timed batch, a function of its own: V8 runs a wasm function in its baseline tier until a later call
// of it (there is no on-stack replacement), so the first trials are slow and the best ones optimized.
template <typename Call>
__attribute__((noinline)) double batch_ms(Call& call) {
  const double t0 = now_ms();
  for (int i = 0; i < kCallsPerBatch; ++i) call();
  return now_ms() - t0;
}

template <typename Call>
double best_gflops(int trials, double flops_per_call, Call&& call) {
  double best = 0.0;
  for (int t = 0; t < trials; ++t) best = std::max(best, flops_per_call * kCallsPerBatch / (batch_ms(call) * 1e6));
  return best;
}

}  // namespace

// clang-19, which compiles the relaxed harness, names a wasm main(argc, argv) __main_argc_argv, which
// Emscripten 3.1.6's start-up code does not call: the label keeps the symbol main for both compilers.
int microkernel_main(int argc, char** argv) __asm__("main");
int microkernel_main(int argc, char** argv) {
  const int trials = argc > 1 ? std::atoi(argv[1]) : 50;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-0.05f, 0.05f);
  AlignedFloats q(size_t(kHeadDim) * kMr), kt(size_t(kHeadDim) * kTileStride), s(size_t(kMr) * kTileStride);
  AlignedFloats v(size_t(kKeys) * kHeadDim), o(size_t(kMr) * kHeadDim), alpha(kMr), row_max(kMr);
  for (size_t i = 0; i < size_t(kHeadDim) * kMr; ++i) q.data[i] = uniform(rng);
  for (size_t i = 0; i < size_t(kHeadDim) * kTileStride; ++i) kt.data[i] = uniform(rng);
  for (size_t i = 0; i < size_t(kKeys) * kHeadDim; ++i) v.data[i] = uniform(rng);
  for (size_t i = 0; i < size_t(kMr) * kHeadDim; ++i) o.data[i] = 0.0f;
  for (int i = 0; i < kMr; ++i) alpha.data[i] = 1.0f;

  // QK^T: 4 rows x 128 keys x Dh multiply-adds; PV: 4 rows x 128 keys x Dh.
  const double flops = 2.0 * kMr * kKeys * kHeadDim;
  ScoreEpilogue ep;  // no softcap, ALiBi or bias: the plain call's micro-kernel
  ep.scale = 0.125f;
  const double qk = best_gflops(trials, flops, [&] {
    qk_tile<false>(q.data, kHeadDim, kt.data, kKeys, ep, s.data, nullptr);
    clobber(s.data);
  });
  const double qk_max = best_gflops(trials, flops, [&] {
    qk_tile<false>(q.data, kHeadDim, kt.data, kKeys, ep, s.data, row_max.data);
    clobber(s.data);
    clobber(row_max.data);
  });
  // p: small positive weights, as after the softmax (the accumulators stay far from overflow).
  for (size_t i = 0; i < size_t(kMr) * kTileStride; ++i) s.data[i] = 1e-4f;
  const double pv = best_gflops(trials, flops, [&] {
    pv_tile(s.data, v.data, kHeadDim, kKeys, alpha.data, o.data);
    clobber(o.data);
  });
  std::printf("%s qk_tile %.2f\n%s qk_tile+max %.2f\n%s pv_tile %.2f\n", MHA_SIMD_VARIANT_NAME, qk,
              MHA_SIMD_VARIANT_NAME, qk_max, MHA_SIMD_VARIANT_NAME, pv);
  std::fflush(stdout);
  return 0;
}
