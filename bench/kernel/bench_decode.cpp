// Timing harness of the KV cache's decode step (not a test: it asserts nothing), its sections (steps, phases,
// softcap, ab, prefill) sharing the shapes, caches and timing (ceilings.hpp: the ceilings and their timer).
// Built natively and for wasm with threads (bench/kernel/CMakeLists.txt), run under Node for the engine users have:
//   node --no-experimental-fetch build/wasm/bench/bench_decode.js [rounds] [phases|split|softcap|ab [shape]|prefill]
//   build/native/bench/bench_decode [rounds] [prefill]
//
// Per round, interleaved: the streaming-read bandwidth and the mul+add ceiling (ceilings.hpp) on 1 and 2
// threads, and ONE decode step of every row (shape x dtype x threads). A row's step therefore finds its cache
// evicted by the other rows (hundreds of MiB streamed in between), as a real model's layers would.
// A step appends one token at length T and is undone by an O(1) truncate, so every step reads T + 1 keys.
//
// Reported per row: median ms [min - max], effective GB/s (K and V bytes read / median time), the
// roofline max(K/V bytes / bandwidth, 4*B*H*T*Dh / mul+add ceiling) with that round's thread count's
// median ceilings, and the step's share of it.
// `phases`: instead, per shape and dtype (one thread; and two for decode-mqa-8k), the step with phases of
// the simd128 decode kernel skipped in turn (the test seam's decode_phase_mask, src/mha/core/test_seam.hpp), down to
// none: what is left then is the driver (plan, merge, threads).
// `split`: instead, decode-mqa-8k on 2 threads, per step: items, keys and kernel time of each thread.
// `softcap`: instead, each shape and dtype without and with softcap 30 (1 thread).
// `prefill`: instead, a causal prefill of 2048 tokens (H 32, Hkv 8, Dh 64, one thread: the issue's
// (1, 2048, 2048, 32, 8, 64)) through an empty cache (the tiled kernel, f32 and f16; and the decode
// kernel forced, for comparison) against the stateless causal call.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "mha/kernels/kernel.hpp"
#include "mha/decode/decode.hpp"
#include "mha/decode/decode_kernel.hpp"
#include "mha/cache/kv_cache.hpp"
#include "mha/core/parallel.hpp"

#include "mha/core/test_seam.hpp"  // decode_phase_mask (`phases`)
#include "ceilings.hpp"

static_assert(mha::test_seam::kEnabled, "the bench cores are built with the test seam (CMakeLists.txt)");

namespace {

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

// The arguments of one decode step over `s`'s dims, one new token per batch item: q and out (B, 1, H·Dh),
// the new k and v (B, 1, Hkv·Dh; the same buffer, its values do not matter for timing), default scale.
mha::CacheAttendArgs one_token_step(const Shape& s, const float* q, const float* new_kv, float* out) {
  mha::CacheAttendArgs args;
  args.new_tokens = 1;
  const int64_t q_width = int64_t{s.heads} * s.head_dim, kv_width = int64_t{s.kv_heads} * s.head_dim;
  args.q = {q, q_width, q_width};
  args.k = {new_kv, kv_width, kv_width};
  args.v = {new_kv, kv_width, kv_width};
  args.out = {out, q_width, q_width};
  args.num_heads = s.heads;
  args.scale = mha::default_scale(s.head_dim);
  return args;
}

std::vector<float> random_floats(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  return v;
}

// The buffers of one-token steps over any of `shapes`: q and out (B, 1, H·Dh) and the new k, v (never wider),
// sized for the widest shape.
struct StepBuffers {
  std::vector<float> q, new_kv, out;
  StepBuffers(const Shape* shapes, size_t count) {
    int32_t max_q = 0;
    for (size_t i = 0; i < count; ++i) max_q = std::max(max_q, shapes[i].batch * shapes[i].heads * shapes[i].head_dim);
    q = random_floats(size_t(max_q), 3);
    new_kv = random_floats(size_t(max_q), 4);
    out.resize(size_t(max_q));
  }
  mha::CacheAttendArgs step(const Shape& s) { return one_token_step(s, q.data(), new_kv.data(), out.data()); }
};

double kv_bytes_read(const Shape& s, mha::CacheDType dtype) {
  const double element = dtype == mha::CacheDType::kFloat16 ? 2.0 : 4.0;
  return 2.0 * s.batch * s.kv_heads * (s.length + 1.0) * s.head_dim * element;
}
double step_flops(const Shape& s) { return 4.0 * s.batch * s.heads * (s.length + 1.0) * s.head_dim; }

}  // namespace

// Prefill rows: (name, stateless, dtype, path).
int prefill_section(int rounds) {
  constexpr int32_t S = 2048, H = 32, Hkv = 8, Dh = 64, D = H * Dh, Dkv = Hkv * Dh;
  struct PrefillRow {
    const char* name;
    bool stateless;
    mha::CacheDType dtype;
    mha::CachePath path;
    std::vector<double> ms;
  };
  std::vector<PrefillRow> rows = {
      {"stateless causal (1,2048,2048,32,8,64)", true, mha::CacheDType::kFloat32, mha::CachePath::kAuto, {}},
      {"cache f32 (tiled kernel)", false, mha::CacheDType::kFloat32, mha::CachePath::kAuto, {}},
      {"cache f16 (tiled kernel)", false, mha::CacheDType::kFloat16, mha::CachePath::kAuto, {}},
      {"cache f32, decode kernel forced", false, mha::CacheDType::kFloat32, mha::CachePath::kDecodeKernel, {}},
  };
  const auto q = random_floats(size_t(S) * D, 5), k = random_floats(size_t(S) * Dkv, 6),
             v = random_floats(size_t(S) * Dkv, 7);
  std::vector<float> out(q.size());
  mha::Workspace tiled;
  mha::DecodeScratch scratch;
  std::vector<std::unique_ptr<mha::KVCache>> caches;
  for (const PrefillRow& row : rows) {
    caches.emplace_back();
    if (!row.stateless) mha::KVCache::create({1, Hkv, Dh, S, row.dtype}, caches.back());
  }
  for (int round = 0; round < 1 + rounds; ++round) {
    for (size_t i = 0; i < rows.size(); ++i) {
      PrefillRow& row = rows[i];
      mha::Status status;
      const double t0 = now_ms();
      if (row.stateless) {
        mha::AttentionArgs a;
        a.shape = mha::AttentionShape{1, S, S, D, H, Hkv};
        a.q = mha::dense_view(q.data(), S, D);
        a.k = mha::dense_view(k.data(), S, Dkv);
        a.v = mha::dense_view(v.data(), S, Dkv);
        a.out = mha::dense_view(out.data(), S, D);
        a.causal = true;
        a.scale = mha::default_scale(Dh);
        status = mha::attention(a, tiled);
      } else {
        mha::CacheAttendArgs a;
        a.new_tokens = S;
        a.q = {q.data(), int64_t{S} * D, D};
        a.k = {k.data(), int64_t{S} * Dkv, Dkv};
        a.v = {v.data(), int64_t{S} * Dkv, Dkv};
        a.out = {out.data(), int64_t{S} * D, D};
        a.num_heads = H;
        a.scale = mha::default_scale(Dh);
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
  std::printf("%d rounds, one thread, causal prefill of 2048 tokens, 32 query heads, 8 KV heads, Dh 64\n", rounds);
  for (const PrefillRow& row : rows) {
    const Stats st = stats(row.ms);
    // The same round's stateless time over this row's: the ratio a noisy machine disturbs least.
    std::vector<double> ratios;
    for (size_t r = 0; r < row.ms.size(); ++r) ratios.push_back(rows[0].ms[r] / row.ms[r]);
    const Stats ratio = stats(ratios);
    std::printf(
        "%-38s %9.2f ms [%8.2f - %8.2f]  %5.1f GFLOP/s  %.2fx the stateless call's speed (per round %.2fx [%.2f - "
        "%.2f])\n",
        row.name, st.median, st.min, st.max, flops / (st.median * 1e6), stateless / st.median, ratio.median, ratio.min,
        ratio.max);
  }
  return 0;
}

#if MHA_F16_SIMD
struct CacheSet {
  std::vector<std::unique_ptr<mha::KVCache>> caches;
};

// Caches filled with T random tokens (random q, k, v: a realistic softmax), capacity T + 1.
bool fill_caches(const Shape* shapes, size_t count, CacheSet& set) {
  for (size_t i = 0; i < count; ++i) {
    const Shape& s = shapes[i];
    for (mha::CacheDType dtype : {mha::CacheDType::kFloat32, mha::CacheDType::kFloat16}) {
      std::unique_ptr<mha::KVCache> cache;
      if (mha::KVCache::create({s.batch, s.kv_heads, s.head_dim, s.length + 1, dtype}, cache) != mha::Status::kOk)
        return false;
      const int32_t width = s.kv_heads * s.head_dim;
      const auto k = random_floats(size_t(s.batch) * s.length * width, 1);
      const auto v = random_floats(k.size(), 2);
      cache->append({k.data(), int64_t{s.length} * width, width}, {v.data(), int64_t{s.length} * width, width},
                    s.length);
      set.caches.push_back(std::move(cache));
    }
  }
  return true;
}

int phases_section(const Shape* shapes, size_t shape_count, int rounds) {
  CacheSet set;
  if (!fill_caches(shapes, shape_count, set)) return 1;
  mha::ParallelAttention parallel(2);
  struct Variant {
    const char* name;
    int mask;
  };
  static const Variant variants[] = {
      {"all phases", 15}, {"no PV", 7}, {"no softmax, PV", 3}, {"pack q only", 1}, {"driver only", 0}};
  struct PhaseRow {
    size_t cache;
    const Shape* shape;
    int threads;
    const Variant* variant;
    std::vector<double> ms;
  };
  std::vector<PhaseRow> rows;
  for (size_t c = 0; c < set.caches.size(); ++c)
    for (int threads : {1, 2}) {
      if (threads == 2 && std::string(shapes[c / 2].name) != "decode-mqa-8k") continue;
      for (const Variant& v : variants) rows.push_back(PhaseRow{c, &shapes[c / 2], threads, &v, {}});
    }
  StepBuffers buffers(shapes, shape_count);
  mha::DecodeScratch scratch;
  mha::Workspace tiled;
  for (int round = 0; round < 3 + rounds; ++round) {
    // Rows of one cache run back to back, so the later ones may find it in the L3: odd rounds run the
    // rows in reverse order.
    for (size_t i = 0; i < rows.size(); ++i) {
      PhaseRow& row = rows[round % 2 == 0 ? i : rows.size() - 1 - i];
      const Shape& s = *row.shape;
      mha::KVCache& cache = *set.caches[row.cache];
      mha::CacheAttendArgs args = buffers.step(s);
      mha::test_seam::decode_phase_mask = row.variant->mask;
      const double t0 = now_ms();
      const mha::Status status = mha::cache_attend(cache, args, scratch, row.threads == 2 ? &parallel : nullptr, tiled);
      const double ms = now_ms() - t0;
      if (status != mha::Status::kOk || cache.truncate(s.length) != mha::Status::kOk) return 1;
      if (round >= 3) row.ms.push_back(ms);
    }
  }
  mha::test_seam::decode_phase_mask = 15;  // every phase again
  std::printf("%d rounds, one decode step per row and round, phases of the simd128 decode kernel skipped\n\n", rounds);
  std::printf("%-14s %-4s %2s %-16s %8s %17s  %8s\n", "shape", "kv", "th", "phases", "ms", "[min - max]", "share");
  for (size_t i = 0; i < rows.size(); ++i) {
    const PhaseRow& row = rows[i];
    const Stats st = stats(row.ms);
    const PhaseRow& full = rows[i - size_t(row.variant - variants)];
    const double share = 100.0 * st.median / stats(full.ms).median;
    std::printf("%-14s %-4s %2d %-16s %8.3f [%7.3f - %7.3f]  %7.0f%%\n", row.shape->name,
                set.caches[row.cache]->config().dtype == mha::CacheDType::kFloat16 ? "f16" : "f32", row.threads,
                row.variant->name, st.median, st.min, st.max, share);
  }
  return 0;
}

// One step per row and round, 1 thread: no softcap, and softcap 30 (Gemma 2's attention cap) with the
// build's decode kernel.
// `ab`: no softcap only, the rows an A/B compares between two builds run alternately.
int softcap_section(const Shape* shapes, size_t shape_count, int rounds, bool ab) {
  CacheSet set;
  if (!fill_caches(shapes, shape_count, set)) return 1;
  struct CapRow {
    size_t cache;
    float softcap;
    const mha::DecodeKernel* kernel;
    std::vector<double> ms;
  };
  std::vector<CapRow> rows;
  for (size_t c = 0; c < set.caches.size(); ++c) {
    const float cap = ab ? 0.0f : 30.0f;
    rows.push_back(CapRow{c, 0.0f, &mha::default_decode_kernel(), {}});
    if (!ab) rows.push_back(CapRow{c, cap, &mha::default_decode_kernel(), {}});
  }
  StepBuffers buffers(shapes, shape_count);
  mha::DecodeScratch scratch;
  mha::Workspace tiled;
  for (int round = 0; round < 3 + rounds; ++round) {
    for (size_t i = 0; i < rows.size(); ++i) {  // odd rounds in reverse, as in phases_section
      CapRow& row = rows[round % 2 == 0 ? i : rows.size() - 1 - i];
      const Shape& s = shapes[row.cache / 2];
      mha::KVCache& cache = *set.caches[row.cache];
      mha::CacheAttendArgs args = buffers.step(s);
      args.softcap = row.softcap;
      args.kernel = row.kernel;
      const double t0 = now_ms();
      const mha::Status status = mha::cache_attend(cache, args, scratch, nullptr, tiled);
      const double ms = now_ms() - t0;
      if (status != mha::Status::kOk || cache.truncate(s.length) != mha::Status::kOk) return 1;
      if (round >= 3) row.ms.push_back(ms);
    }
  }
  std::printf("%d rounds, one decode step per row and round, one thread\n\n", rounds);
  for (size_t i = 0; i < rows.size(); ++i) {
    const CapRow& row = rows[i];
    const Stats st = stats(row.ms);
    const bool build = row.kernel == &mha::default_decode_kernel();
    std::printf("%-14s %-4s softcap %4.0f %-6s %8.3f ms [%7.3f - %7.3f]", shapes[row.cache / 2].name,
                set.caches[row.cache]->config().dtype == mha::CacheDType::kFloat16 ? "f16" : "f32", double(row.softcap),
                build ? "build" : "old", st.median, st.min, st.max);
    if (!build) {  // the same round's time over the build kernel's (the row before)
      std::vector<double> ratios;
      for (size_t r = 0; r < row.ms.size(); ++r) ratios.push_back(row.ms[r] / rows[i - 1].ms[r]);
      const Stats ratio = stats(ratios);
      const auto above = std::count_if(ratios.begin(), ratios.end(), [](double x) { return x > 1.0; });
      std::printf("  old/build per round %.2fx [%.2f - %.2f], %.0f%% above 1", ratio.median, ratio.min, ratio.max,
                  100.0 * double(above) / double(ratios.size()));
    }
    std::printf("\n");
  }
  return 0;
}
#endif

#if MHA_F16_SIMD
// `split`: decode-mqa-8k steps on 2 threads (B * Hkv = 1: the key blocks are the only parallel work),
// with a kernel that wraps the build's and records, per worker (told apart by its scratch), the items,
// keys and time it ran: how evenly one step's key blocks split, and how much of the step is not kernel.
struct SplitRecord {
  const float* scratch = nullptr;
  int64_t items = 0, keys = 0;
  double busy_ms = 0.0;
};
SplitRecord split_records[2];
void split_run(const mha::DecodeBlock& blk, float* scratch) {
  const double t0 = now_ms();
  mha::default_decode_kernel().run(blk, scratch);
  const double ms = now_ms() - t0;
  for (SplitRecord& r : split_records) {
    if (r.scratch != nullptr && r.scratch != scratch) continue;
    r.scratch = scratch;  // a worker's scratch stays put once the driver has reserved it
    r.items += 1, r.keys += blk.key_end - blk.key_begin, r.busy_ms += ms;
    return;
  }
}
size_t split_scratch_floats(int32_t head_dim, int32_t value_dim) {
  return mha::default_decode_kernel().scratch_floats(head_dim, value_dim);
}
const mha::DecodeKernel kSplitKernel{"split", &split_scratch_floats, &split_run};

int split_section(const Shape& s, int rounds) {
  CacheSet set;
  if (!fill_caches(&s, 1, set)) return 1;
  mha::ParallelAttention parallel(2);
  const int64_t q_width = int64_t{s.heads} * s.head_dim, kv_width = int64_t{s.kv_heads} * s.head_dim;
  const auto q = random_floats(size_t(q_width), 3), new_kv = random_floats(size_t(kv_width), 4);
  std::vector<float> out(static_cast<size_t>(q_width));
  mha::DecodeScratch scratch;
  mha::Workspace tiled;
  std::printf("%s, 2 threads, one step per line (the worker is woken from its wait: the steps are 20 ms apart)\n",
              s.name);
  std::printf("%-4s %8s | %-28s | %-28s | %s\n", "kv", "step ms", "thread A: items keys busy ms",
              "thread B: items keys busy ms", "step - max busy");
  for (int round = 0; round < rounds; ++round) {
    for (size_t c = 0; c < set.caches.size(); ++c) {
      mha::CacheAttendArgs args = one_token_step(s, q.data(), new_kv.data(), out.data());
      args.kernel = &kSplitKernel;
      for (SplitRecord& r : split_records) r = SplitRecord{};
      const double wait_until = now_ms() + 20.0;
      while (now_ms() < wait_until) {
      }
      const double t0 = now_ms();
      const mha::Status status = mha::cache_attend(*set.caches[c], args, scratch, &parallel, tiled);
      const double ms = now_ms() - t0;
      if (status != mha::Status::kOk || set.caches[c]->truncate(s.length) != mha::Status::kOk) return 1;
      const SplitRecord& a = split_records[0];
      const SplitRecord& b = split_records[1];
      std::printf("%-4s %8.3f | %5lld %6lld %8.3f         | %5lld %6lld %8.3f         | %.3f\n", c == 0 ? "f32" : "f16",
                  ms, (long long)a.items, (long long)a.keys, a.busy_ms, (long long)b.items, (long long)b.keys,
                  b.busy_ms, ms - std::max(a.busy_ms, b.busy_ms));
    }
  }
  return 0;
}
#endif

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
#if MHA_F16_SIMD
  if (argc > 2 && std::string(argv[2]) == "phases") return phases_section(shapes, 4, rounds);
  if (argc > 2 && std::string(argv[2]) == "softcap") return softcap_section(shapes, 4, rounds, false);
  if (argc > 2 && std::string(argv[2]) == "ab") {
    for (size_t i = 0; argc > 3 && i < std::size(shapes); ++i)  // `ab <shape>`: that shape only
      if (std::string(argv[3]) == shapes[i].name) return softcap_section(&shapes[i], 1, rounds, true);
    return softcap_section(shapes, 4, rounds, true);
  }
  if (argc > 2 && std::string(argv[2]) == "split") return split_section(shapes[2], rounds);
#endif
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
      cache->append({k.data(), int64_t{s.length} * width, width}, {v.data(), int64_t{s.length} * width, width},
                    s.length);
      for (int threads : {1, 2}) rows.push_back(Row{&s, dtype, threads, cache.get(), {}});
      caches.push_back(std::move(cache));
    }
  }
  StepBuffers buffers(shapes, std::size(shapes));

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
      mha::CacheAttendArgs args = buffers.step(s);
      const double t0 = now_ms();
      const mha::Status status =
          mha::cache_attend(*row.cache, args, scratch, row.threads == 2 ? &parallel : nullptr, tiled);
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
    std::printf("threads %d: streaming read %.2f GB/s [%.2f - %.2f], mul+add %.1f GFLOP/s [%.1f - %.1f]\n", t,
                bw[t].median, bw[t].min, bw[t].max, fl[t].median, fl[t].min, fl[t].max);
  }
  std::printf("%d rounds, decode kernel %s\n\n", rounds, mha::decode_kernel_name(mha::default_decode_kernel()));
  std::printf("%-14s %-4s %2s  %8s %17s  %7s  %8s %6s %6s\n", "shape", "kv", "th", "ms", "[min - max]", "GB/s",
              "roof ms", "bound", "% roof");
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
                bytes / (st.median * 1e6), roof, memory_ms >= compute_ms ? "memory" : "flops",
                100.0 * roof / st.median);
    median_of[&s - shapes][int(row.dtype)][row.threads] = st.median;
  }
  std::printf("\nf16 / f32 speed-up, decode-mha-8k: 1 thread %.2fx, 2 threads %.2fx\n",
              median_of[0][0][1] / median_of[0][1][1], median_of[0][0][2] / median_of[0][1][2]);
  std::printf("2 threads / 1 thread, decode-mqa-8k: f32 %.2fx, f16 %.2fx\n", median_of[2][0][1] / median_of[2][0][2],
              median_of[2][1][1] / median_of[2][1][2]);
  std::printf("(checksums %d %g)\n", isink, double(fsink));
  return 0;
}
