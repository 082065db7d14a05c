// Kernel timing harness: not a test (it asserts nothing and no suite runs it). It times mha::attention
// (single thread, the build's default kernel variant) on the benchmark shapes with seeded inputs, so two
// builds of the core (before and after a kernel change) can be compared interleaved in one session:
//
//   bench/kernel/compare.sh <old src dir> <new src dir> [rounds] [shapes]
//
// Output: one line per shape, `name ms gflops calls cpu_ms cpu_gflops`: medians over the calls in the
// budget of the wall time and of the process's CPU time (on a machine shared with other jobs the CPU
// time is the steadier of the two: time spent descheduled does not count).
// Built by CMake as mha_kernel_timing (wasm and native), or by compare.sh straight from a source tree.
// Flops count every (query, key) pair as bench/lib/shapes.mjs does (causal: half).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#ifdef __EMSCRIPTEN__
#include <emscripten.h>
#else
#include <time.h>
#endif

#include "mha/core/shape.hpp"
#include "mha/core/workspace.hpp"
#if __has_include("mha/kernels/kernel.hpp")
#include "mha/kernels/kernel.hpp"
#else
#include "mha/attention.hpp"  // a core from before the kernel interface (for before/after comparisons)
#endif

namespace {

struct TimedShape {
  const char* name;
  int32_t batch, seq_len, kv_seq_len, d_model, num_heads;
  bool causal;
  int32_t num_kv_heads = 0;                     // 0 = num_heads
  int32_t window_left = -1, window_right = -1;  // -1 = unbounded
  float softcap = 0.0f;
  bool alibi = false;
  bool bias = false;  // full (B, H, S, T) bias
};

const TimedShape kShapes[] = {
    {"bert", 1, 128, 128, 768, 12, false},
    {"bert-b8", 8, 128, 128, 768, 12, false},
    {"causal512", 1, 512, 512, 512, 8, true},
    {"cross", 4, 64, 1024, 512, 8, false},
    {"long2k", 1, 2048, 2048, 768, 12, false},
    // The options of issue #13 (need a core with AttentionArgs::num_kv_heads and friends).
    {"bert-bias", 1, 128, 128, 768, 12, false, 0, -1, -1, 0.0f, false, true},
    {"bert-alibi", 1, 128, 128, 768, 12, false, 0, -1, -1, 0.0f, true, false},
    {"bert-softcap", 1, 128, 128, 768, 12, false, 0, -1, -1, 30.0f, false, false},
    {"gqa2k-mha", 1, 2048, 2048, 2048, 32, true},
    {"gqa2k", 1, 2048, 2048, 2048, 32, true, 8},
    {"causal8k", 1, 8192, 8192, 512, 8, true},
    {"window8k", 1, 8192, 8192, 512, 8, true, 0, 511, 0},
};

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#ifdef __EMSCRIPTEN__
// Node's CPU time of this process (user + system), in ms.
EM_JS(double, cpu_ms, (), {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
});
#else
double cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
#endif

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& f : x) f = normal(rng);
  return x;
}

void time_shape(const TimedShape& s, double budget_ms) {
  const int32_t kv_heads = s.num_kv_heads > 0 ? s.num_kv_heads : s.num_heads;
  const int32_t head_dim = s.d_model / s.num_heads;
  const int32_t kv_d = kv_heads * head_dim;
  std::mt19937 rng(20240601);
  const auto q = random_floats(size_t(s.batch) * s.seq_len * s.d_model, rng);
  const auto k = random_floats(size_t(s.batch) * s.kv_seq_len * kv_d, rng);
  const auto v = random_floats(size_t(s.batch) * s.kv_seq_len * kv_d, rng);
  std::vector<float> out(q.size());
  mha::AttentionArgs args;
  args.shape = mha::AttentionShape{s.batch, s.seq_len, s.kv_seq_len, s.d_model, s.num_heads};
  args.q = mha::dense_view(q.data(), s.seq_len, s.d_model);
  args.k = mha::dense_view(k.data(), s.kv_seq_len, kv_d);
  args.v = mha::dense_view(v.data(), s.kv_seq_len, kv_d);
  args.out = mha::dense_view(out.data(), s.seq_len, s.d_model);
  args.causal = s.causal;
  args.scale = mha::default_scale(head_dim);
  std::vector<float> bias, slopes;
  const bool v2 = s.num_kv_heads > 0 || s.window_left >= 0 || s.softcap > 0 || s.alibi || s.bias;
#ifdef MHA_TIMING_V2
  args.shape.num_kv_heads = kv_heads;
  args.window_left = s.window_left;
  args.window_right = s.window_right;
  args.softcap = s.softcap;
  if (s.alibi) {
    for (int32_t h = 0; h < s.num_heads; ++h) slopes.push_back(std::exp2(-8.0f * (h + 1) / s.num_heads));
    args.alibi_slopes = slopes.data();
  }
  if (s.bias) {
    bias = random_floats(size_t(s.batch) * s.num_heads * s.seq_len * s.kv_seq_len, rng);
    args.bias =
        mha::BiasView{bias.data(), int64_t{s.num_heads} * s.seq_len * s.kv_seq_len, int64_t{s.seq_len} * s.kv_seq_len};
  }
#else
  if (v2) return;  // this core has no such options
#endif
  (void)v2;
  mha::Workspace workspace;
  if (mha::attention(args, workspace) != mha::Status::kOk) {
    std::printf("%s failed\n", s.name);
    return;
  }
  // Warm-up: V8 compiles wasm with a baseline tier first and optimizes in the background.
  for (const double warm_start = now_ms(); now_ms() - warm_start < std::min(300.0, budget_ms / 2);)
    mha::attention(args, workspace);
  std::vector<double> times, cpu_times;
  const double start = now_ms();
  while (times.size() < 3 || (now_ms() - start < budget_ms && times.size() < 2000)) {
    const double t0 = now_ms(), c0 = cpu_ms();
    mha::attention(args, workspace);
    cpu_times.push_back(cpu_ms() - c0);
    times.push_back(now_ms() - t0);
  }
  std::sort(times.begin(), times.end());
  std::sort(cpu_times.begin(), cpu_times.end());
  const double median = times[times.size() / 2], cpu_median = cpu_times[cpu_times.size() / 2];
  double pairs = double(s.batch) * s.num_heads * s.seq_len * s.kv_seq_len;
  if (s.causal) pairs *= 0.5;
  const double flops = 4.0 * pairs * head_dim;
  std::printf("%s %.4f %.2f %zu %.4f %.2f\n", s.name, median, flops / (median * 1e6), times.size(), cpu_median,
              flops / (cpu_median * 1e6));
  std::fflush(stdout);
}

}  // namespace

// Arguments: [budget ms per shape] [comma-separated shape names] (default: 1500, the v1 shapes).
int main(int argc, char** argv) {
  const double budget = argc > 1 ? std::atof(argv[1]) : 1500.0;
  const std::string names = argc > 2 ? argv[2] : "bert,bert-b8,causal512,cross,long2k";
  for (const TimedShape& s : kShapes) {
    if (("," + names + ",").find("," + std::string(s.name) + ",") != std::string::npos) time_shape(s, budget);
  }
  return 0;
}
