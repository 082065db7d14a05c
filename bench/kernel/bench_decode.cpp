// Timing harness of the KV cache's decode step (not a test: it asserts nothing). Built natively and for
// wasm with threads (bench/kernel/CMakeLists.txt), run under Node for the engine users have:
//   node --no-experimental-fetch build/wasm/bench/bench_decode.js [rounds] [prefill]
//   build/native/bench/bench_decode [rounds] [prefill]
//
// Per round, interleaved: the streaming-read bandwidth (a SIMD sum over 256 MiB, 8x this machine's L3) on
// 1 and 2 threads, the mul+add ceiling (12 independent f32x4 x = x * m + c chains) on 1 and 2 threads,
// and ONE decode step of every row (shape x dtype x threads). A row's step therefore finds its cache
// evicted by the other rows (hundreds of MiB streamed in between), as a real model's layers would.
// A step appends one token at length T and is undone by an O(1) truncate, so every step reads T + 1 keys.
//
// Reported per row: median ms [min - max], effective GB/s (K and V bytes read / median time), the
// roofline max(K/V bytes / bandwidth, 4*B*H*T*Dh / mul+add ceiling) with that round's thread count's
// median ceilings, and the step's share of it.
// `prefill`: instead, a causal prefill of 1024 tokens (16 heads, Dh 64, one thread) through an empty
// cache (the tiled kernel on f32, the decode kernel on f16 and GQA) against the stateless causal call.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "mha/kernel.hpp"
#include "mha/decode.hpp"
#include "mha/kv_cache.hpp"
#include "mha/parallel.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double now_ms() { return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count(); }

struct Stats {
  double median = 0, min = 0, max = 0;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return Stats{v[v.size() / 2], v.front(), v.back()};
}

// ---- Ceilings

constexpr size_t kBandwidthBytes = size_t{256} << 20;

struct SumJob {
  const int32_t* data;
  size_t ints_per_part;
  int32_t sums[4];
};

// Measured functions are never inlined into main: V8 tiers a wasm function up to optimized code only
// between calls, and main runs for the whole benchmark.
#define MHA_BENCH_NOINLINE __attribute__((noinline))

// One pass over part `index`: 8 independent i32x4 accumulators, 128 bytes per iteration (integer adds
// have one cycle of latency, so the loop is bound by the loads).
MHA_BENCH_NOINLINE void sum_part(void* ctx, int64_t index, int) {
  auto* job = static_cast<SumJob*>(ctx);
  using VecI = xsimd::batch<int32_t>;
  const int32_t* p = job->data + size_t(index) * job->ints_per_part;
  const int32_t* end = p + job->ints_per_part;
  VecI a0(0), a1(0), a2(0), a3(0), a4(0), a5(0), a6(0), a7(0);
  for (; p < end; p += 32) {
    a0 += VecI::load_aligned(p), a1 += VecI::load_aligned(p + 4), a2 += VecI::load_aligned(p + 8), a3 += VecI::load_aligned(p + 12);
    a4 += VecI::load_aligned(p + 16), a5 += VecI::load_aligned(p + 20), a6 += VecI::load_aligned(p + 24), a7 += VecI::load_aligned(p + 28);
  }
  job->sums[index] = xsimd::hadd(((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)));
}

// GB/s of one pass over the buffer split into `threads` parts.
MHA_BENCH_NOINLINE double bandwidth_pass(const int32_t* data, int threads, mha::ThreadPool* pool, int32_t* sink) {
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
  float results[4];
};

MHA_BENCH_NOINLINE void mul_add_part(void* ctx, int64_t index, int) {
  auto* job = static_cast<MulAddJob*>(ctx);
  using VecF = xsimd::batch<float>;
  const VecF m(0.9999f), c(1e-4f);
  VecF x[12];
  for (int i = 0; i < 12; ++i) x[i] = VecF(1.0f + i / 64.0f + index);
  for (int64_t it = 0; it < job->iterations; ++it)
    for (int i = 0; i < 12; ++i) x[i] = x[i] * m + c;
  VecF sum(0.0f);
  for (int i = 0; i < 12; ++i) sum += x[i];
  job->results[index] = xsimd::hadd(sum);
}

// GFLOP/s (a mul and an add count 2 per lane) of `threads` independent chains of work.
MHA_BENCH_NOINLINE double mul_add_pass(int threads, mha::ThreadPool* pool, float* sink) {
  MulAddJob job{4000000, {0, 0, 0, 0}};
  const double t0 = now_ms();
  if (threads == 1) {
    mul_add_part(&job, 0, 0);
  } else {
    pool->parallel_for(threads, &mul_add_part, &job);
  }
  const double ms = now_ms() - t0;
  *sink += job.results[0] + job.results[1];
  return double(job.iterations) * 12 * 4 * 2 * threads / (ms * 1e6);
}

// ---- Decode rows

struct Shape {
  const char* name;
  int32_t batch, length, heads, kv_heads, head_dim;  // (B, T, H, Hkv, Dh)
};

struct Row {
  const Shape* shape;
  mha::CacheDType dtype;
  int threads;
  mha::KVCache* cache;
  std::vector<double> ms;
};

std::vector<float> random_floats(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  return v;
}

double kv_bytes_read(const Shape& s, mha::CacheDType dtype) {
  const double element = dtype == mha::CacheDType::kFloat16 ? 2.0 : 4.0;
  return 2.0 * s.batch * s.kv_heads * (s.length + 1.0) * s.head_dim * element;
}
double step_flops(const Shape& s) { return 4.0 * s.batch * s.heads * (s.length + 1.0) * s.head_dim; }

}  // namespace

// Prefill rows: (name, Hkv, dtype, path); the stateless call is the row with Hkv = 0.
int prefill_section(int rounds) {
  constexpr int32_t S = 1024, H = 16, Dh = 64, D = H * Dh;
  struct PrefillRow {
    const char* name;
    int32_t kv_heads;
    mha::CacheDType dtype;
    mha::CachePath path;
    std::vector<double> ms;
  };
  std::vector<PrefillRow> rows = {
      {"stateless causal (1,1024,1024,16,64)", 0, mha::CacheDType::kFloat32, mha::CachePath::kAuto, {}},
      {"cache f32, tiled kernel", H, mha::CacheDType::kFloat32, mha::CachePath::kAuto, {}},
      {"cache f32, decode kernel", H, mha::CacheDType::kFloat32, mha::CachePath::kDecodeKernel, {}},
      {"cache f16, decode kernel", H, mha::CacheDType::kFloat16, mha::CachePath::kAuto, {}},
      {"cache f32 GQA Hkv 4, decode kernel", 4, mha::CacheDType::kFloat32, mha::CachePath::kAuto, {}},
  };
  const auto q = random_floats(size_t(S) * D, 5), k = random_floats(size_t(S) * D, 6), v = random_floats(size_t(S) * D, 7);
  std::vector<float> out(q.size());
  mha::Workspace tiled;
  mha::DecodeScratch scratch;
  std::vector<std::unique_ptr<mha::KVCache>> caches;
  for (const PrefillRow& row : rows) {
    caches.emplace_back();
    if (row.kv_heads > 0) mha::KVCache::create({1, row.kv_heads, Dh, S, row.dtype}, caches.back());
  }
  for (int round = 0; round < 1 + rounds; ++round) {
    for (size_t i = 0; i < rows.size(); ++i) {
      PrefillRow& row = rows[i];
      mha::Status status;
      const double t0 = now_ms();
      if (row.kv_heads == 0) {
        mha::AttentionArgs a;
        a.shape = mha::AttentionShape{1, S, S, D, H};
        a.q = mha::dense_view(q.data(), S, D);
        a.k = mha::dense_view(k.data(), S, D);
        a.v = mha::dense_view(v.data(), S, D);
        a.out = mha::dense_view(out.data(), S, D);
        a.causal = true;
        a.scale = mha::default_scale(Dh);
        status = mha::attention(a, tiled);
      } else {
        const int32_t kv_width = row.kv_heads * Dh;
        mha::CacheAttendArgs a;
        a.new_tokens = S;
        a.q = {q.data(), int64_t{S} * D, D};
        a.k = {k.data(), int64_t{S} * kv_width, kv_width};
        a.v = {v.data(), int64_t{S} * kv_width, kv_width};
        a.out = {out.data(), int64_t{S} * D, D};
        a.options.num_heads = H;
        a.options.scale = mha::default_scale(Dh);
        a.path = row.path;
        status = mha::cache_attend(*caches[i], a, scratch, nullptr, tiled);
        caches[i]->truncate(0);
      }
      const double ms = now_ms() - t0;
      if (status != mha::Status::kOk) {
        std::printf("prefill failed: %s\n", mha::status_name(status));
        return 1;
      }
      if (round > 0) row.ms.push_back(ms);
    }
  }
  const double flops = 4.0 * S * S * H * Dh / 2;
  const double stateless = stats(rows[0].ms).median;
  std::printf("%d rounds, one thread, causal prefill of 1024 tokens, 16 query heads, Dh 64\n", rounds);
  for (const PrefillRow& row : rows) {
    const Stats st = stats(row.ms);
    std::printf("%-38s %9.2f ms [%8.2f - %8.2f]  %5.1f GFLOP/s  %.2fx the stateless call's speed\n", row.name, st.median, st.min,
                st.max, flops / (st.median * 1e6), stateless / st.median);
  }
  return 0;
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 25;
  if (argc > 2 && std::string(argv[2]) == "prefill") return prefill_section(rounds);
  const int warmup = 3;
  static const Shape shapes[] = {
      {"decode-mha-8k", 1, 8192, 16, 16, 64},
      {"decode-gqa-4k", 1, 4096, 32, 8, 128},
      {"decode-mqa-8k", 1, 8192, 16, 1, 128},
      {"decode-b4", 4, 1024, 16, 4, 64},
  };
  mha::ParallelAttention parallel(2);
  if (parallel.threads() != 2) std::printf("note: only %d thread(s) could start\n", parallel.threads());

  // Caches filled once with T random tokens (random q, k, v: a realistic softmax).
  std::vector<std::unique_ptr<mha::KVCache>> caches;
  std::vector<Row> rows;
  for (const Shape& s : shapes) {
    for (mha::CacheDType dtype : {mha::CacheDType::kFloat32, mha::CacheDType::kFloat16}) {
      std::unique_ptr<mha::KVCache> cache;
      const mha::KVCacheConfig config{s.batch, s.kv_heads, s.head_dim, s.length + 1, dtype};
      if (mha::KVCache::create(config, cache) != mha::Status::kOk) {
        std::printf("cannot create the cache of %s\n", s.name);
        return 1;
      }
      const int32_t width = s.kv_heads * s.head_dim;
      const auto k = random_floats(size_t(s.batch) * s.length * width, 1);
      const auto v = random_floats(k.size(), 2);
      cache->append({k.data(), int64_t{s.length} * width, width}, {v.data(), int64_t{s.length} * width, width}, s.length);
      for (int threads : {1, 2}) rows.push_back(Row{&s, dtype, threads, cache.get(), {}});
      caches.push_back(std::move(cache));
    }
  }
  int32_t max_q = 0;
  for (const Shape& s : shapes) max_q = std::max(max_q, s.batch * s.heads * s.head_dim);
  const auto q = random_floats(size_t(max_q), 3);
  const auto new_kv = random_floats(size_t(max_q), 4);
  std::vector<float> out(static_cast<size_t>(max_q));

  void* buffer = std::aligned_alloc(64, kBandwidthBytes);
  auto* ints = static_cast<int32_t*>(buffer);
  for (size_t i = 0; i < kBandwidthBytes / sizeof(int32_t); ++i) ints[i] = int32_t(i);
  int32_t isink = 0;
  float fsink = 0.0f;
  std::vector<double> bandwidth[3], ceiling[3];  // [threads]

  mha::DecodeScratch scratch;
  mha::Workspace tiled;
  for (int round = 0; round < warmup + rounds; ++round) {
    const bool keep = round >= warmup;
    for (int threads : {1, 2}) {
      const double gbps = bandwidth_pass(ints, threads, &parallel.pool(), &isink);
      const double gflops = mul_add_pass(threads, &parallel.pool(), &fsink);
      if (keep) bandwidth[threads].push_back(gbps), ceiling[threads].push_back(gflops);
    }
    for (Row& row : rows) {
      const Shape& s = *row.shape;
      mha::CacheAttendArgs args;
      args.new_tokens = 1;
      const int64_t q_width = int64_t{s.heads} * s.head_dim, kv_width = int64_t{s.kv_heads} * s.head_dim;
      args.q = {q.data(), q_width, q_width};
      args.k = {new_kv.data(), kv_width, kv_width};
      args.v = {new_kv.data(), kv_width, kv_width};
      args.out = {out.data(), q_width, q_width};
      args.options.num_heads = s.heads;
      args.options.scale = mha::default_scale(s.head_dim);
      const double t0 = now_ms();
      const mha::Status status = mha::cache_attend(*row.cache, args, scratch, row.threads == 2 ? &parallel : nullptr, tiled);
      const double ms = now_ms() - t0;
      if (status != mha::Status::kOk || row.cache->truncate(s.length) != mha::Status::kOk) {
        std::printf("step failed: %s\n", mha::status_name(status));
        return 1;
      }
      if (keep) row.ms.push_back(ms);
    }
  }
  std::free(buffer);

  Stats bw[3], fl[3];
  for (int t : {1, 2}) {
    bw[t] = stats(bandwidth[t]);
    fl[t] = stats(ceiling[t]);
    std::printf("threads %d: streaming read %.2f GB/s [%.2f - %.2f], mul+add %.1f GFLOP/s [%.1f - %.1f]\n", t, bw[t].median,
                bw[t].min, bw[t].max, fl[t].median, fl[t].min, fl[t].max);
  }
  std::printf("%d rounds, decode kernel %s\n\n", rounds, mha::decode_kernel_name(mha::default_decode_kernel()));
  std::printf("%-14s %-4s %2s  %8s %17s  %7s  %8s %6s %6s\n", "shape", "kv", "th", "ms", "[min - max]", "GB/s", "roof ms", "bound",
              "% roof");
  double median_of[8][2][3] = {};
  for (const Row& row : rows) {
    const Shape& s = *row.shape;
    const Stats st = stats(row.ms);
    const double bytes = kv_bytes_read(s, row.dtype);
    const double memory_ms = bytes / (bw[row.threads].median * 1e6);
    const double compute_ms = step_flops(s) / (fl[row.threads].median * 1e6);
    const double roof = std::max(memory_ms, compute_ms);
    std::printf("%-14s %-4s %2d  %8.3f [%7.3f - %7.3f]  %7.2f  %8.3f %6s %5.0f%%\n", s.name,
                row.dtype == mha::CacheDType::kFloat16 ? "f16" : "f32", row.threads, st.median, st.min, st.max,
                bytes / (st.median * 1e6), roof, memory_ms >= compute_ms ? "memory" : "flops", 100.0 * roof / st.median);
    median_of[&s - shapes][int(row.dtype)][row.threads] = st.median;
  }
  std::printf("\nf16 / f32 speed-up, decode-mha-8k: 1 thread %.2fx, 2 threads %.2fx\n", median_of[0][0][1] / median_of[0][1][1],
              median_of[0][0][2] / median_of[0][1][2]);
  std::printf("2 threads / 1 thread, decode-mqa-8k: f32 %.2fx, f16 %.2fx\n", median_of[2][0][1] / median_of[2][0][2],
              median_of[2][1][1] / median_of[2][1][2]);
  std::printf("(checksums %d %g)\n", isink, double(fsink));
  return 0;
}
