// The physical ceilings the decode benches measure in the same run as their steps: the streaming-read
// bandwidth (a SIMD sum over 256 MiB, 8x a 32 MiB L3) and the mul+add rate (the faster of 12 f32x4 chains
// x = x * m + c and 8 x = x * m beside 8 y = y + c), on 1 or 2 threads; and their timer. Included by
// bench_decode.cpp and bench_decode_stream.cpp (one translation unit each).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "mha/core/parallel.hpp"

namespace {

using Clock = std::chrono::steady_clock;
inline double now_ms() { return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count(); }

// The median and range of a row's samples.
struct Stats {
  double median = 0, min = 0, max = 0;
};
inline Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return Stats{v[v.size() / 2], v.front(), v.back()};
}

constexpr size_t kBandwidthBytes = size_t{256} << 20;

struct SumJob {
  const int32_t* data;
  size_t ints_per_part;
  int32_t sums[4];
};

// Measured functions are never inlined into main: V8 tiers a wasm function up to optimized code only
// between calls, and main runs for the whole benchmark.
#define MHA_BENCH_NOINLINE __attribute__((noinline))

// The sum of [p, end) (a multiple of 32 ints, 16-byte aligned): 8 independent i32x4 accumulators, 128 bytes
// per iteration (integer adds have one cycle of latency, so the loop is bound by the loads).
inline int32_t streaming_sum(const int32_t* p, const int32_t* end) {
  using VecI = xsimd::batch<int32_t>;
  VecI a0(0), a1(0), a2(0), a3(0), a4(0), a5(0), a6(0), a7(0);
  for (; p < end; p += 32) {
    a0 += VecI::load_aligned(p), a1 += VecI::load_aligned(p + 4), a2 += VecI::load_aligned(p + 8),
        a3 += VecI::load_aligned(p + 12);
    a4 += VecI::load_aligned(p + 16), a5 += VecI::load_aligned(p + 20), a6 += VecI::load_aligned(p + 24),
        a7 += VecI::load_aligned(p + 28);
  }
  return xsimd::hadd(((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)));
}

// One pass over part `index`.
MHA_BENCH_NOINLINE inline void sum_part(void* ctx, int64_t index, int) {
  auto* job = static_cast<SumJob*>(ctx);
  const int32_t* p = job->data + size_t(index) * job->ints_per_part;
  job->sums[index] = streaming_sum(p, p + job->ints_per_part);
}

// GB/s of one pass over the buffer split into `threads` parts.
MHA_BENCH_NOINLINE inline double bandwidth_pass(const int32_t* data, int threads, mha::ThreadPool* pool,
                                                int32_t* sink) {
  SumJob job{data, kBandwidthBytes / sizeof(int32_t) / threads, {0, 0, 0, 0}};
  const double t0 = now_ms();
  if (threads == 1) {
    sum_part(&job, 0, 0);
  } else {
    pool->parallel_for(threads, &sum_part, &job);
  }
  const double ms = now_ms() - t0;
  *sink += job.sums[0] + job.sums[1];
  return double(kBandwidthBytes) / (ms * 1e6);
}

struct MulAddJob {
  int64_t iterations;
  float multiplier;  // 0.9999 (dependent chains) or 1 (split chains); from memory, so LLVM cannot fold x * 1
  float results[4];
};

// 12 chains x = x * m + c: a multiply feeding an add, as in a micro-kernel's step.
MHA_BENCH_NOINLINE inline void mul_add_dependent_part(void* ctx, int64_t index, int) {
  auto* job = static_cast<MulAddJob*>(ctx);
  using VecF = xsimd::batch<float>;
  const VecF m(job->multiplier), c(1e-4f);
  VecF x[12];
  for (int i = 0; i < 12; ++i) x[i] = VecF(1.0f + i / 64.0f + index);
  for (int64_t it = 0; it < job->iterations; ++it)
    for (int i = 0; i < 12; ++i) x[i] = x[i] * m + c;
  VecF sum(0.0f);
  for (int i = 0; i < 12; ++i) sum += x[i];
  job->results[index] = xsimd::hadd(sum);
}

// 8 chains x = x * m beside 8 chains y = y + c, which no latency bounds (bench/lib/ceiling.mjs: where adds
// issue on more ports than multiplies, the dependent chains are latency-bound). The fastest of ceiling.mjs's
// loops in Node; its other two only matter in Chromium.
MHA_BENCH_NOINLINE inline void mul_add_split_part(void* ctx, int64_t index, int) {
  auto* job = static_cast<MulAddJob*>(ctx);
  using VecF = xsimd::batch<float>;
  const VecF m(job->multiplier), c(1e-4f);
  VecF x[8], y[8];
  for (int i = 0; i < 8; ++i) x[i] = y[i] = VecF(1.0f + i / 64.0f + index);
#ifdef __clang__  // unrolled 4x as bench/lib/ceiling.mjs is: the loop's own instructions out of the way
#pragma clang loop unroll_count(4)
#endif
  for (int64_t it = 0; it < job->iterations; ++it) {
    for (int i = 0; i < 8; ++i) {
      x[i] = x[i] * m;
      y[i] = y[i] + c;
    }
  }
  VecF sum(0.0f);
  for (int i = 0; i < 8; ++i) sum += x[i] + y[i];
  job->results[index] = xsimd::hadd(sum);
}

// GFLOP/s (a mul and an add count 2 per lane) of `threads` independent copies of the faster of the two
// loops above.
MHA_BENCH_NOINLINE inline double mul_add_pass(int threads, mha::ThreadPool* pool, float* sink) {
  struct Form {
    void (*part)(void*, int64_t, int);
    float multiplier;
    double flops_per_iteration;  // per thread
  };
  const Form forms[2] = {{&mul_add_dependent_part, 0.9999f, 12 * 4 * 2}, {&mul_add_split_part, 1.0f, 16 * 4}};
  double best = 0.0;
  for (const Form& form : forms) {
    MulAddJob job{4000000, form.multiplier, {0, 0, 0, 0}};
    const double t0 = now_ms();
    if (threads == 1) {
      form.part(&job, 0, 0);
    } else {
      pool->parallel_for(threads, form.part, &job);
    }
    const double ms = now_ms() - t0;
    *sink += job.results[0] + job.results[1];
    best = std::max(best, double(job.iterations) * form.flops_per_iteration * threads / (ms * 1e6));
  }
  return best;
}

}  // namespace
