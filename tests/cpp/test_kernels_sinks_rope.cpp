// Every kernel variant on the v0.3 options (docs/spec.md Part 4): value heads of their own size (Dv < Dh,
// Dv > Dh, odd Dv), sinks and rope, alone and with the Part 2 options, on misaligned and strided views,
// against the reference; and the properties that tie them to calls without them, bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "mha/kernels/kernel.hpp"
#include "mha/reference/reference.hpp"
#include "test_util.hpp"
#include "strided_call.hpp"

using mha::AttentionShape;
using mha::Status;
using mha_test::StridedCall;

namespace {

// A random call of seed `seed`: shape (Dv from a list of odd and even sizes), then each option with some
// probability. Rope tables cover every query and key position.
StridedCall random_call(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng); };
  auto coin = [&](int percent) { return pick(0, 99) < percent; };
  const int32_t dh_choices[] = {4, 8, 12, 16, 32};
  const int32_t dv_choices[] = {1, 5, 13, 20, 0, 3, 24, 40};
  const int32_t dh = dh_choices[pick(0, 4)];
  const int32_t kv_heads = pick(1, 2), group = pick(1, 3);
  AttentionShape s{pick(1, 2), pick(1, 80), pick(1, 150), 0, kv_heads * group, kv_heads, dv_choices[pick(0, 7)]};
  s.d_model = s.num_heads * dh;
  StridedCall c(s, seed * 7 + 1, coin(30) ? pick(1, 3) : 0, coin(30) ? pick(1, 5) : 0);
  mha::AttentionArgs& a = c.base;
  a.causal = coin(40);
  if (coin(30)) a.query_offset = pick(0, 40);
  if (coin(20)) a.window_left = pick(0, 30);
  if (coin(15)) a.window_right = pick(0, 30);
  if (coin(20)) {
    for (int32_t b = 0; b < s.batch; ++b) c.kv_lengths.push_back(pick(0, s.kv_seq_len));
  }
  if (coin(20)) a.softcap = 5.0f;
  if (coin(20)) c.alibi = mha_test::random_tensor(size_t(s.num_heads), seed + 3, 0.1f);
  if (coin(20)) c.random_bias(seed + 4);
  if (coin(30)) a.empty_rows = mha::EmptyRows::kZero;
  if (coin(60)) c.random_sinks(seed + 5, coin(20) ? 20.0f : 2.0f);
  if (coin(60)) {
    const int32_t rotary = 2 * pick(1, dh / 2);
    c.set_rope(rotary, std::max(a.query_offset + s.seq_len, s.kv_seq_len) + pick(0, 3), coin(50));
  }
  return c;
}

struct Result {
  std::vector<float> out, lse;
};

Result run(const StridedCall& c, const mha::KernelVariant* kernel) {
  Result r;
  mha::Workspace workspace;
  const mha::AttentionArgs a = c.args(r.out, &r.lse);
  REQUIRE((kernel ? mha::attention(a, workspace, *kernel) : mha::reference_attention(a)) == Status::kOk);
  return r;
}

void check_against_reference(const StridedCall& c, const mha::KernelVariant& kernel) {
  const Result ref = run(c, nullptr), got = run(c, &kernel);
  mha_test::require_close(ref.out, got.out, 2e-5f);
  mha_test::require_close_lse(ref.lse, got.lse, 2e-5f);
}

}  // namespace

TEST_CASE("kernels, sinks and rope: random calls with Dv, sinks and rope and the Part 2 options match the reference",
          "[kernels][sinks-rope]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    const StridedCall c = random_call(seed);
    const mha::AttentionArgs& a = c.base;
    INFO("kernel " << kernel.name << " seed " << seed << ": B " << c.shape.batch << " S " << c.shape.seq_len << " T "
                   << c.shape.kv_seq_len << " H " << c.shape.num_heads << " Hkv " << c.shape.num_kv_heads << " Dh "
                   << c.shape.head_dim() << " Dv " << c.shape.value_dim() << " causal " << a.causal << " sinks "
                   << !c.sinks.empty() << " rope " << !c.cos.empty() << " pad " << c.row_pad << " offset " << c.offset);
    check_against_reference(c, kernel);
  }
}

TEST_CASE("kernels, sinks and rope: Dv below, above and beside Dh on long rows (several tiles, blocks and units)",
          "[kernels][sinks-rope]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  for (int32_t dv : {1, 5, 13, 20, 8, 64}) {
    for (bool causal : {false, true}) {
      INFO("kernel " << kernel.name << " Dv " << dv << " causal " << causal);
      StridedCall c(AttentionShape{1, 150, 300, 32, 2, 1, dv}, uint64_t(dv) * 31 + causal, 1, 3);
      c.base.causal = causal;
      c.base.query_offset = causal ? 150 : 0;
      check_against_reference(c, kernel);
    }
  }
}

TEST_CASE("kernels, sinks and rope: sinks give rows without a visible key out 0 and lse = sink; a dominating sink",
          "[kernels][sinks-rope]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  INFO("kernel " << kernel.name);
  for (bool zero_rows : {false, true}) {
    StridedCall c(AttentionShape{2, 9, 12, 16, 4, 2, 6}, 901);
    c.kv_lengths = {0, 12};  // batch 0 sees nothing
    c.base.causal = true;    // with query_offset 0 and a window of 0 on the left ...
    c.base.window_left = 0;  // ... batch 1 row i sees key i only
    c.base.empty_rows = zero_rows ? mha::EmptyRows::kZero : mha::EmptyRows::kNaN;
    c.sinks = {0.5f, -1.0f, 40.0f, 3.0f};  // head 2's sink dominates every key
    const Result ref = run(c, nullptr), got = run(c, &kernel);
    mha_test::require_close(ref.out, got.out, 2e-5f);
    mha_test::require_close_lse(ref.lse, got.lse, 2e-5f);
    const int32_t row = 4 * 6;  // out (B, S, H*Dv)
    for (int32_t i = 0; i < 9 * row; ++i) REQUIRE(got.out[size_t(i)] == 0.0f);
    for (int32_t h = 0; h < 4; ++h) {
      for (int32_t i = 0; i < 9; ++i) REQUIRE(got.lse[size_t(h * 9 + i)] == Approx(c.sinks[size_t(h)]).epsilon(1e-6));
    }
  }
}

TEST_CASE("kernels, sinks and rope: sinks of -1e30 are no sinks, cos 1 sin 0 is no rope, bit for bit",
          "[kernels][sinks-rope]") {
  const mha::KernelVariant& kernel = EACH_KERNEL();
  for (uint64_t seed = 500; seed < 530; ++seed) {
    StridedCall c = random_call(seed);
    c.sinks.clear();
    c.cos.clear();
    c.sin.clear();
    c.base.rope = mha::RotaryTables{};
    INFO("kernel " << kernel.name << " seed " << seed);
    const Result plain = run(c, &kernel);
    StridedCall sunk = c;
    sunk.sinks.assign(size_t(c.shape.num_heads), -1e30f);
    const Result with_sinks = run(sunk, &kernel);
    // Rows without a visible key differ by definition (out 0, lse -1e30); compare the others.
    const AttentionShape& sh = c.shape;
    const int32_t dv = sh.value_dim();
    for (int32_t b = 0; b < sh.batch; ++b) {
      for (int32_t h = 0; h < sh.num_heads; ++h) {
        for (int32_t i = 0; i < sh.seq_len; ++i) {
          const size_t at = (size_t(b) * sh.num_heads + h) * sh.seq_len + i;
          if (!std::isfinite(plain.lse[at])) continue;
          REQUIRE(std::memcmp(&plain.lse[at], &with_sinks.lse[at], sizeof(float)) == 0);
          const size_t o = (size_t(b) * sh.seq_len + i) * sh.out_d_model() + size_t(h) * dv;
          REQUIRE(std::memcmp(&plain.out[o], &with_sinks.out[o], sizeof(float) * dv) == 0);
        }
      }
    }
    const int32_t dh = c.shape.head_dim();
    for (int32_t rotary : {dh, 2}) {
      const bool interleaved = rotary == 2;
      StridedCall turned = c;
      turned.set_identity_rope(rotary, std::max(c.base.query_offset + c.shape.seq_len, c.shape.kv_seq_len),
                               interleaved);
      const Result rotated = run(turned, &kernel);
      REQUIRE(mha_test::bit_equal(plain.out, rotated.out));
      REQUIRE(mha_test::bit_equal(plain.lse, rotated.lse));
    }
  }
}
