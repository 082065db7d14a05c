// The options of docs/spec.md Part 2 (grouped-query attention, query positions, key lengths, windows,
// softcap, ALiBi, bias, empty rows, lse) in every kernel variant against the reference: random
// combinations at sizes around the tiles' edges, and the properties the spec promises.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "mha/kernels/kernel.hpp"
#include "mha/reference/reference.hpp"
#include "test_util.hpp"

using namespace mha_test;

namespace {

// Sizes around the micro-kernels' 4 rows / 8 keys and the tiles' 64 / 128 keys and 64-row blocks.
const int kEdgeSizes[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127, 128, 129, 191, 193};

// A random problem with random options, from one seed (printed by the caller).
Problem random_options_problem(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uni = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto real = [&rng](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto edge = [&]() { return kEdgeSizes[uni(0, int(std::size(kEdgeSizes)) - 1)]; };
  const int dh = std::vector<int>{1, 3, 4, 7, 8, 9, 16, 17, 32, 64}[uni(0, 9)];
  const int kv_heads = uni(1, 3);
  const int group = std::vector<int>{1, 1, 2, 3, 4}[uni(0, 4)];
  const int heads = kv_heads * group;
  const int batch = uni(1, 2);
  // Keep one problem cheap (the reference is O(B H S T Dh)).
  int s = edge(), t = uni(0, 3) == 0 ? s : edge();
  while (int64_t{batch} * heads * s * t * dh > 3000000) (s > t ? s : t) = std::max(1, (s > t ? s : t) / 2);
  mha::AttentionShape shape{batch, s, t, heads * dh, heads, uni(0, 4) == 0 && group == 1 ? 0 : kv_heads};
  const auto mask_kind = static_cast<MaskKind>(uni(0, 6) < 4 ? 0 : uni(1, 3));
  Problem p = make_problem(shape, seed, 1.0f, mask_kind, uni(0, 1) == 0, uni(0, 1), uni(0, 3) == 0 ? uni(1, 5) : 0);
  if (uni(0, 4) == 0) p.scale = static_cast<float>(real(-1.5, 1.5));
  Options& o = p.options;
  switch (uni(0, 3)) {  // query positions: upper-left, lower-right (a decode chunk), anywhere
    case 0: break;
    case 1: o.query_offset = std::max(0, t - s); break;
    default: o.query_offset = uni(0, 2 * t); break;
  }
  if (uni(0, 3) == 0) {
    for (int b = 0; b < batch; ++b) o.kv_lengths.push_back(uni(0, 5) == 0 ? uni(0, 1) * t : uni(0, t));
  }
  if (uni(0, 2) == 0) {
    auto bound = [&]() { return std::vector<int>{-1, 0, 1, 3, 8, 63, 64, 65, 100}[uni(0, 8)]; };
    o.window_left = bound();
    o.window_right = bound();
  }
  if (uni(0, 3) == 0) o.softcap = static_cast<float>(real(0.5, 40.0));
  if (uni(0, 3) == 0) {
    for (int h = 0; h < heads; ++h)
      o.alibi_slopes.push_back(static_cast<float>(uni(0, 1) ? std::exp2(-8.0 * (h + 1) / heads) : real(-0.5, 0.5)));
  }
  if (uni(0, 3) == 0) {
    p.random_bias(uni(0, 1) ? batch : 1, uni(0, 1) ? heads : 1, seed + 11, static_cast<float>(real(0.1, 4.0)),
                  uni(0, 2) == 0 ? real(0.0, 0.6) : 0.0);
  }
  o.empty_rows = uni(0, 1) ? mha::EmptyRows::kZero : mha::EmptyRows::kNaN;
  o.lse = uni(0, 3) != 0;
  return p;
}

}  // namespace

TEST_CASE("options: random combinations at the tiles' edges match the reference (out and lse)", "[options][kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  std::mt19937_64 pick(20261201);
  for (int trial = 0; trial < 300; ++trial) {
    const uint64_t seed = pick();
    const Problem p = random_options_problem(seed);
    const Options& o = p.options;
    INFO("trial " << trial << " seed " << seed << ": B=" << p.shape.batch << " S=" << p.shape.seq_len
                  << " T=" << p.shape.kv_seq_len << " H=" << p.shape.num_heads << " Hkv=" << p.shape.kv_heads()
                  << " Dh=" << p.shape.head_dim() << " causal=" << p.causal << " mask=" << !p.mask.empty()
                  << " offset=" << o.query_offset << " kvLengths=" << o.kv_lengths.size() << " window=["
                  << o.window_left << ", " << o.window_right << "] softcap=" << o.softcap
                  << " alibi=" << o.alibi_slopes.size() << " bias=" << o.bias_batch << "x" << o.bias_heads
                  << " emptyRows=" << int(o.empty_rows) << " lse=" << o.lse << " scale=" << p.scale);
    const Outputs out = run_both(p, kernel);
    require_close(out.ref, out.fast);
    if (o.lse) require_close_lse(out.ref_lse, out.fast_lse);
  }
}

TEST_CASE("options: grouped-query attention equals multi-head attention on repeated KV heads, bit for bit",
          "[options][kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  for (const auto& [s, t, heads, kv_heads, dh, causal] :
       {std::make_tuple(70, 70, 8, 2, 16, true), std::make_tuple(33, 130, 6, 3, 9, false),
        std::make_tuple(300, 300, 4, 1, 64, true), std::make_tuple(5, 200, 12, 4, 32, false)}) {
    INFO("S=" << s << " T=" << t << " H=" << heads << " Hkv=" << kv_heads << " Dh=" << dh << " causal=" << causal);
    Problem gqa = make_problem({2, s, t, heads * dh, heads, kv_heads}, 71 + s, 1.0f, MaskKind::kRandom, causal);
    gqa.options.window_left = 50;
    gqa.options.lse = true;
    Problem mha_problem = make_problem({2, s, t, heads * dh, heads}, 0, 1.0f, MaskKind::kNone, causal);
    mha_problem.mask = gqa.mask;
    mha_problem.options = gqa.options;
    const int group = heads / kv_heads;
    for (int b = 0; b < 2; ++b)
      for (int j = 0; j < t; ++j)
        for (int h = 0; h < heads; ++h)
          for (int e = 0; e < dh; ++e) {
            mha_problem.k_at(b, j, h * dh + e) = gqa.k_at(b, j, (h / group) * dh + e);
            mha_problem.v_at(b, j, h * dh + e) = gqa.v_at(b, j, (h / group) * dh + e);
          }
    mha_problem.q = gqa.q;
    const Outputs g = run_both(gqa, kernel), m = run_both(mha_problem, kernel);
    REQUIRE(bit_equal(g.fast, m.fast));
    REQUIRE(bit_equal(g.fast_lse, m.fast_lse));
    REQUIRE(bit_equal(g.ref, m.ref));
    require_close(g.ref, g.fast);
  }
}

TEST_CASE("options: a broadcast bias (zero strides) equals the same bias expanded, bit for bit", "[options][kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  for (const auto& [bias_batch, bias_heads] : {std::make_pair(1, 1), std::make_pair(1, 3), std::make_pair(2, 1)}) {
    INFO("biasShape [" << bias_batch << ", " << bias_heads << ", S, T]");
    Problem broadcast = make_problem({2, 70, 90, 3 * 16, 3}, 81, 1.0f, MaskKind::kNone, true);
    broadcast.random_bias(bias_batch, bias_heads, 82, 2.0f, 0.1);
    Problem full = broadcast;
    full.random_bias(2, 3, 0);
    const size_t plane = 70 * 90;
    for (int b = 0; b < 2; ++b)
      for (int h = 0; h < 3; ++h)
        std::copy_n(
            &broadcast.options.bias[((bias_batch == 1 ? 0 : b) * bias_heads + (bias_heads == 1 ? 0 : h)) * plane],
            plane, &full.options.bias[(size_t(b) * 3 + h) * plane]);
    const Outputs o1 = run_both(broadcast, kernel), o2 = run_both(full, kernel);
    REQUIRE(bit_equal(o1.fast, o2.fast));
    REQUIRE(bit_equal(o1.ref, o2.ref));
    require_close(o1.ref, o1.fast);
  }
}

TEST_CASE("options: the lse combines attention over two disjoint key sets into the attention over both",
          "[options][kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  // Keys [0, 100) in two halves by mask; out = sum over the halves of exp(lse_half - lse) * out_half.
  Problem whole = make_problem({1, 40, 100, 2 * 16, 2}, 91);
  whole.options.lse = true;
  whole.options.softcap = 20.0f;
  whole.options.alibi_slopes = {0.25f, 0.0625f};
  Problem first = whole, second = whole;
  first.mask.assign(size_t(40) * 100, 0);
  second.mask.assign(size_t(40) * 100, 0);
  for (int i = 0; i < 40; ++i)
    for (int j = 0; j < 100; ++j) (j < 37 ? first : second).mask_at(0, i, j) = 1;
  const Outputs all = run_both(whole, kernel), a = run_both(first, kernel), b = run_both(second, kernel);
  std::vector<float> combined(all.fast.size());
  for (int i = 0; i < 40; ++i)
    for (int h = 0; h < 2; ++h) {
      const size_t n = size_t(h) * 40 + i;
      const double la = a.fast_lse[n], lb = b.fast_lse[n];
      const double lse = std::max(la, lb) + std::log1p(std::exp(-std::fabs(la - lb)));
      REQUIRE(std::fabs(lse - all.fast_lse[n]) <= 1e-5 * std::max(1.0, std::fabs(lse)));
      for (int e = 0; e < 16; ++e) {
        const size_t c = size_t(i) * 32 + h * 16 + e;
        combined[c] = static_cast<float>(std::exp(la - lse) * a.fast[c] + std::exp(lb - lse) * b.fast[c]);
      }
    }
  require_close(all.ref, combined);
}

TEST_CASE("options: empty rows are NaN or 0 with lse -inf; a NaN score makes its row NaN either way",
          "[options][kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  for (const mha::EmptyRows empty : {mha::EmptyRows::kNaN, mha::EmptyRows::kZero}) {
    INFO("emptyRows " << int(empty));
    Problem p = make_problem({2, 9, 70, 2 * 8, 2}, 101);
    p.options.empty_rows = empty;
    p.options.lse = true;
    p.options.kv_lengths = {70, 0};  // batch 1: no keys at all
    p.random_bias(1, 2, 102);
    for (int j = 0; j < 70; ++j) p.options.bias[size_t(3) * 70 + j] = -kInf;  // head 0, row 3: every score -inf
    p.options.bias[size_t(9 * 70) + 5 * 70 + 11] = kNaN;                      // head 1, row 5: one NaN score
    const Outputs o = run_both(p, kernel);
    require_close(o.ref, o.fast);
    require_close_lse(o.ref_lse, o.fast_lse);
    const float fill = empty == mha::EmptyRows::kZero ? 0.0f : kNaN;
    auto out_at = [&](int b, int i, int c) { return o.fast[(size_t(b) * 9 + i) * 16 + c]; };
    auto same = [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); };
    for (int c = 0; c < 8; ++c) REQUIRE(same(out_at(0, 3, c), fill));
    for (int c = 8; c < 16; ++c) REQUIRE(std::isfinite(out_at(0, 3, c)));
    for (int c = 8; c < 16; ++c) REQUIRE(std::isnan(out_at(0, 5, c)));
    for (int i = 0; i < 9; ++i)
      for (int c = 0; c < 16; ++c) REQUIRE(same(out_at(1, i, c), fill));
    REQUIRE(o.fast_lse[3] == -kInf);
    REQUIRE(std::isnan(o.fast_lse[9 + 5]));
    for (int n = 18; n < 36; ++n) REQUIRE(o.fast_lse[size_t(n)] == -kInf);
  }
}

TEST_CASE("options: units in shuffled order and in other splits give bit-identical results with every option",
          "[options][kernels][units]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  for (uint64_t seed : {111u, 112u}) {
    INFO("seed " << seed);
    Problem p = make_problem({2, 150, 290, 6 * 8, 6, 2}, seed, 1.0f, MaskKind::kRandom, seed == 111);
    p.options.query_offset = 40;
    p.options.window_left = 70;
    p.options.window_right = seed == 111 ? -1 : 20;
    p.options.kv_lengths = {290, 201};
    p.options.softcap = 10.0f;
    p.options.alibi_slopes = {0.5f, 0.25f, 0.125f, 0.0625f, 0.03125f, 0.015625f};
    p.random_bias(1, 6, seed + 1, 1.0f, 0.05);
    p.options.lse = true;
    std::vector<float> whole, whole_lse, resplit, resplit_lse;
    mha::Workspace ws;
    REQUIRE(mha::attention(p.args(whole, &whole_lse), ws, kernel) == mha::Status::kOk);
    const mha::AttentionArgs a = p.args(resplit, &resplit_lse);
    const mha::KernelPlan plan = kernel.plan(a);
    REQUIRE(plan.heads_per_kv_head == 3);
    std::vector<float> scratch_buffer(plan.scratch.total + 16);
    float* scratch = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch_buffer.data()) + 63) / 64 * 64);
    // Units of 1, 2, 3, ... rows, last ones first, with dirty scratch.
    std::vector<mha::WorkUnit> units;
    for (int32_t b = 0; b < 2; ++b)
      for (int32_t g = 0; g < 2; ++g)
        for (int32_t i = 0, size = 1; i < 150; i += size, size = size % plan.rows_per_unit + 1)
          units.push_back(mha::WorkUnit{b, g, i, std::min(i + size, 150)});
    std::reverse(units.begin(), units.end());
    for (const mha::WorkUnit& unit : units) {
      std::fill(scratch, scratch + plan.scratch.total, kNaN);
      kernel.run_unit(a, plan, unit, scratch);
    }
    REQUIRE(bit_equal(whole, resplit));
    REQUIRE(bit_equal(whole_lse, resplit_lse));
  }
}

TEST_CASE("options: a window over S * T beyond 2^31 runs in O(S * W) and reads only its keys", "[options][kernels]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  // 46341^2 > 2^31 query-key pairs, but window [0, 0]: each query sees the key at its own position only.
  Problem p = make_problem({1, 46341, 46341, 2 * 2, 2, 1}, 121);
  p.options.window_left = 0;
  p.options.window_right = 0;
  p.options.lse = true;
  std::vector<float> out, lse;
  mha::Workspace ws;
  REQUIRE(mha::attention(p.args(out, &lse), ws, kernel) == mha::Status::kOk);
  for (int32_t i : {0, 1, 777, 23170, 46339, 46340})
    for (int32_t c = 0; c < 4; ++c) {
      INFO("row " << i << " column " << c);
      REQUIRE(out[size_t(i) * 4 + c] == p.v_at(0, i, c % 2));  // one key: weight exactly 1
    }
  // lse = the one score: scale * q . k.
  const double score =
      double(p.scale) * (double(p.q_at(0, 5, 0)) * p.k_at(0, 5, 0) + double(p.q_at(0, 5, 1)) * p.k_at(0, 5, 1));
  REQUIRE(std::fabs(lse[5] - score) <= 1e-5 * std::max(1.0, std::fabs(score)));
}
